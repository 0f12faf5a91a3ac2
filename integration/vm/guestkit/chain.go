// Package guestkit is what the VM tier's Go tests run in its guests share
// (integration/vm/crash, integration/vm/exclusive): running a conflist
// through libcni as a runtime does, each plugin as its own process, with
// the plugin's CNI error kept; reading the node (links, addresses, routes,
// RDMA devices and their GIDs, SMC's pnet tables, state files); named
// network namespaces; the simrdma NIC's set-up. It is test-only by
// location: plain .go files so both test binaries import it, and nothing
// the product's binaries link imports it (internal/testonly's
// TestProductImportsNone lists what they link; integration/ is not among
// it).
package guestkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// PluginName is the plugin under test's type in the conflists.
const PluginName = "rdma-chain"

// Chain runs the conflists' plugins the way a runtime does (libcni), each
// as its own process, and keeps what libcni drops of the plugin under
// test's last run: how it exited (a death by SIGKILL at a failpoint), its
// stdout (the result it printed) and its stderr (its log).
type Chain struct {
	invoke.RawExec
	version.PluginDecoder
	cni *libcni.CNIConfig

	Failpoint string // RDMA_CHAIN_FAILPOINT for the plugin's next runs
	Trace     string // RDMA_CHAIN_FAILPOINT_TRACE for the plugin's next runs
	Killed    bool   // the plugin's last run died of SIGKILL
	Stdout    []byte // the plugin's last run's stdout (its result or error)
	Stderr    []byte // the plugin's last run's stderr (its log)
}

// NewChain runs the plugins found in binDir.
func NewChain(binDir string) *Chain {
	c := &Chain{}
	c.cni = libcni.NewCNIConfig([]string{binDir}, c)
	return c
}

// PluginError is a plugin's failed run: its name, how it exited, what it
// printed, and the CNI error it printed on stdout (nil when it printed
// none, as a plugin killed before its answer).
type PluginError struct {
	Plugin         string
	Err            error
	Stdout, Stderr string
	CNI            *types.Error
}

func (e *PluginError) Error() string {
	return fmt.Sprintf("%s: %v: %s %s", e.Plugin, e.Err, strings.TrimSpace(e.Stdout), strings.TrimSpace(e.Stderr))
}

// Unwrap gives errors.As the CNI error (*types.Error) and the exit.
func (e *PluginError) Unwrap() []error {
	if e.CNI != nil {
		return []error{e.CNI, e.Err}
	}
	return []error{e.Err}
}

// CNIError is the CNI error a plugin of the call answered with.
func CNIError(err error) (*types.Error, bool) {
	var ce *types.Error
	ok := errors.As(err, &ce)
	return ce, ok
}

// ExecPlugin runs one plugin of the list, with the failpoint variables
// for the plugin under test.
func (c *Chain) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	name := filepath.Base(pluginPath)
	under := name == PluginName
	if under {
		c.Killed, c.Stdout, c.Stderr = false, nil, nil
		if c.Failpoint != "" {
			environ = append(environ, "RDMA_CHAIN_FAILPOINT="+c.Failpoint)
		}
		if c.Trace != "" {
			environ = append(environ, "RDMA_CHAIN_FAILPOINT_TRACE="+c.Trace)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, pluginPath)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.ProcessState == nil { // it never started
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if under {
		c.Stdout, c.Stderr = stdout.Bytes(), stderr.Bytes()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
			c.Killed = ws.Signaled() && ws.Signal() == syscall.SIGKILL
		}
	}
	if err != nil {
		pe := &PluginError{Plugin: name, Err: err, Stdout: stdout.String(), Stderr: stderr.String()}
		var ce types.Error
		if json.Unmarshal(stdout.Bytes(), &ce) == nil && ce.Code != 0 {
			pe.CNI = &ce
		}
		return nil, pe
	}
	return stdout.Bytes(), nil
}

// Pod is one sandbox: its netns and the runtime's arguments, as
// containerd passes them.
type Pod struct {
	Name, NetNS, ContainerID string
	Caps                     map[string]any // capability arguments (runtimeConfig)
}

// RuntimeConf is what the runtime passes for the pod.
func (p Pod) RuntimeConf() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: p.ContainerID,
		NetNS:       p.NetNS,
		IfName:      "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"},
			{"K8S_POD_NAME", p.Name}, {"K8S_POD_UID", "uid-" + p.Name}},
		CapabilityArgs: p.Caps,
	}
}

func timeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// Add is the runtime's ADD of the list.
func (c *Chain) Add(list *libcni.NetworkConfigList, p Pod) error {
	ctx, cancel := timeout()
	defer cancel()
	_, err := c.cni.AddNetworkList(ctx, list, p.RuntimeConf())
	return err
}

// Check is the runtime's CHECK of the list (with the ADD's cached result).
func (c *Chain) Check(list *libcni.NetworkConfigList, p Pod) error {
	ctx, cancel := timeout()
	defer cancel()
	return c.cni.CheckNetworkList(ctx, list, p.RuntimeConf())
}

// Del is the runtime's DEL of the list.
func (c *Chain) Del(list *libcni.NetworkConfigList, p Pod) error {
	ctx, cancel := timeout()
	defer cancel()
	return c.cni.DelNetworkList(ctx, list, p.RuntimeConf())
}

// GC is a runtime's GC with no attachment left valid.
func (c *Chain) GC(list *libcni.NetworkConfigList) error {
	ctx, cancel := timeout()
	defer cancel()
	return c.cni.GCNetworkList(ctx, list, nil)
}

// Conflist is the primary (ptp + host-local) and, with entry (the
// rdma-chain object's fields), rdma-chain after it, at version.
func Conflist(version, entry string) (*libcni.NetworkConfigList, error) {
	plugins := `{"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.0.0/24"}]],"dataDir":"/run/ipam"}}`
	if entry != "" {
		plugins += `,{"type":"` + PluginName + `",` + entry + `}`
	}
	return libcni.ConfListFromBytes([]byte(`{"cniVersion":"` + version + `","name":"rdmanet","plugins":[` + plugins + `]}`))
}

// Only is list with the plugins of type typ alone: a CHECK of it reads
// that plugin's own answer (with the whole list's cached result, as in a
// full CHECK) rather than the first plugin's error.
func Only(list *libcni.NetworkConfigList, typ string) (*libcni.NetworkConfigList, error) {
	sub := *list
	sub.Plugins = nil
	for _, p := range list.Plugins {
		if p.Network.Type == typ {
			sub.Plugins = append(sub.Plugins, p)
		}
	}
	if len(sub.Plugins) == 0 {
		return nil, fmt.Errorf("no plugin of type %s in %s", typ, list.Name)
	}
	return &sub, nil
}
