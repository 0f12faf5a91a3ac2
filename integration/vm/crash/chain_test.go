package crash

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
)

// pluginName is the plugin under test's type in the conflists.
const pluginName = "rdma-chain"

// chain runs the conflists' plugins the way a runtime does (libcni), each
// as its own process, and says how the plugin under test ended: libcni
// turns a plugin's exit into an error and drops how it exited, and a death
// by SIGKILL at a failpoint is what the matrix checks.
type chain struct {
	invoke.RawExec
	version.PluginDecoder
	cni *libcni.CNIConfig

	failpoint string // RDMA_CHAIN_FAILPOINT for the plugin's next runs
	trace     string // RDMA_CHAIN_FAILPOINT_TRACE for the plugin's next runs
	killed    bool   // the plugin's last run died of SIGKILL
}

func newChain(binDir string) *chain {
	c := &chain{}
	c.cni = libcni.NewCNIConfig([]string{binDir}, c)
	return c
}

// ExecPlugin runs one plugin of the list, with the failpoint variables
// for the plugin under test.
func (c *chain) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	under := filepath.Base(pluginPath) == pluginName
	if under {
		c.killed = false
		if c.failpoint != "" {
			environ = append(environ, "RDMA_CHAIN_FAILPOINT="+c.failpoint)
		}
		if c.trace != "" {
			environ = append(environ, "RDMA_CHAIN_FAILPOINT_TRACE="+c.trace)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, pluginPath)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.ProcessState == nil { // it never started
		return nil, fmt.Errorf("%s: %w", filepath.Base(pluginPath), err)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && under {
		c.killed = ws.Signaled() && ws.Signal() == syscall.SIGKILL
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s %s", filepath.Base(pluginPath), err,
			strings.TrimSpace(stdout.String()), strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// pod is one sandbox the matrix attaches: its netns and the runtime's
// arguments, as containerd passes them.
type pod struct {
	name  string
	netns string
}

func (p pod) rt() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: "crash-" + p.name,
		NetNS:       p.netns,
		IfName:      "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"},
			{"K8S_POD_NAME", p.name}, {"K8S_POD_UID", "uid-" + p.name}},
		// An SMC-R pod: on a kernel with SMC its ADD writes both pnet
		// tables, and their failpoints are in the matrix.
		CapabilityArgs: map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{
			"network.alibabacloud.com/erdma-smcr": "true"}},
	}
}

func (c *chain) add(list *libcni.NetworkConfigList, p pod) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.cni.AddNetworkList(ctx, list, p.rt())
	return err
}

func (c *chain) del(list *libcni.NetworkConfigList, p pod) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.cni.DelNetworkList(ctx, list, p.rt())
}

// gc is a runtime's GC with no attachment left valid.
func (c *chain) gc(list *libcni.NetworkConfigList) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.cni.GCNetworkList(ctx, list, nil)
}

// conflist is the primary (ptp + host-local) and, with entry, rdma-chain
// after it, at version.
func conflist(version, entry string) (*libcni.NetworkConfigList, error) {
	plugins := `{"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.0.0/24"}]],"dataDir":"/run/ipam"}}`
	if entry != "" {
		plugins += `,{"type":"` + pluginName + `",` + entry + `}`
	}
	return libcni.ConfListFromBytes([]byte(`{"cniVersion":"` + version + `","name":"rdmanet","plugins":[` + plugins + `]}`))
}

// installPlugin puts the failpoint build as rdma-chain in dir, beside the
// reference plugins of the guest's CNI_PATH.
func installPlugin(dir, build, refDir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := os.ReadFile(build)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, pluginName), b, 0o755); err != nil {
		return err
	}
	for _, p := range []string{"ptp", "host-local", "loopback"} {
		dst := filepath.Join(dir, p)
		if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Symlink(filepath.Join(refDir, p), dst); err != nil {
			return err
		}
	}
	return nil
}
