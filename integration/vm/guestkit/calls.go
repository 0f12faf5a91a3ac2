package guestkit

import (
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// Calls is one scenario part's runtime: a chain at one cniVersion, the
// conflist its next calls use and the plugin's state directory. Each call
// is logged with the plugin's log lines, as a runtime's log would show
// them.
type Calls struct {
	V       string
	C       *Chain
	DataDir string
	List    *libcni.NetworkConfigList
}

// NewCalls is a chain at cniVersion v with its state in dataDir, running
// the plugins in binDir; when t ends, every netns pinned in nsDir and the
// state are removed.
func NewCalls(t *testing.T, v, dataDir string) *Calls {
	c := &Calls{V: v, C: NewChain(BinDir), DataDir: dataDir}
	t.Cleanup(func() {
		paths, _ := os.ReadDir(NSDir)
		for _, p := range paths {
			_ = DeleteNetNS(NSDir + "/" + p.Name())
		}
		_ = os.RemoveAll(c.DataDir)
	})
	return c
}

const (
	BinDir = "/opt/cni/bin"   // the guest's CNI plugins
	NSDir  = "/var/run/netns" // where `ip netns` pins a netns
)

// NewPod is a pod whose netns is pinned at NSDir/name; idPrefix makes its
// container ID.
func NewPod(idPrefix, name string) Pod {
	return Pod{Name: name, NetNS: NSDir + "/" + name, ContainerID: idPrefix + name}
}

// Conf makes the conflist of rdma-chain's fields the one the next calls use.
func (c *Calls) Conf(t *testing.T, fields string) {
	t.Helper()
	l, err := Conflist(c.V, fields)
	if err != nil {
		t.Fatalf("conflist %s {%s}: %v", c.V, fields, err)
	}
	c.List = l
}

// Logged logs one call and the plugin's log lines of it, and returns its
// error.
func (c *Calls) Logged(t *testing.T, verb string, p Pod, err error) error {
	t.Helper()
	t.Logf("%s %s (%s) -> %v", verb, p.Name, c.V, err)
	for _, l := range strings.Split(strings.TrimSpace(string(c.C.Stderr)), "\n") {
		if l != "" {
			t.Logf("  | %s", l)
		}
	}
	return err
}

// NetNS pins a new netns at p's path.
func NetNS(t *testing.T, p Pod) {
	t.Helper()
	if err := NewNetNS(p.NetNS); err != nil {
		t.Fatal(err)
	}
}

// DelNetNS unpins p's netns.
func DelNetNS(t *testing.T, p Pod) {
	t.Helper()
	if err := DeleteNetNS(p.NetNS); err != nil {
		t.Error(err)
	}
}

// Add is a new netns for p and the runtime's ADD.
func (c *Calls) Add(t *testing.T, p Pod) error {
	t.Helper()
	NetNS(t, p)
	return c.AddTo(t, p)
}

// AddTo is the runtime's ADD into p's existing netns.
func (c *Calls) AddTo(t *testing.T, p Pod) error {
	t.Helper()
	return c.Logged(t, "ADD", p, c.C.Add(c.List, p))
}

// Del is the runtime's DEL.
func (c *Calls) Del(t *testing.T, p Pod) error {
	t.Helper()
	return c.Logged(t, "DEL", p, c.C.Del(c.List, p))
}

// Gone is DEL, then p's netns removed.
func (c *Calls) Gone(t *testing.T, p Pod) error {
	t.Helper()
	err := c.Del(t, p)
	DelNetNS(t, p)
	return err
}

// Check is the whole chain's CHECK.
func (c *Calls) Check(t *testing.T, p Pod) error {
	t.Helper()
	return c.Logged(t, "CHECK", p, c.C.Check(c.List, p))
}

// CheckOwn is the CHECK of rdma-chain alone, to read its own error codes.
func (c *Calls) CheckOwn(t *testing.T, p Pod) error {
	t.Helper()
	only, err := Only(c.List, PluginName)
	if err != nil {
		t.Fatal(err)
	}
	return c.Logged(t, "CHECK rdma-chain", p, c.C.Check(only, p))
}

// Records lists the attachment records under the state directory.
func (c *Calls) Records() ([]string, error) { return Records(c.DataDir) }

// RecordCount checks that the state directory holds exactly n records.
func (c *Calls) RecordCount(n int) error { return RecordCount(c.DataDir, n) }
