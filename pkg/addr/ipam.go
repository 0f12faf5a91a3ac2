package addr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// Request is one delegation to an IPAM plugin. It is run exactly as CNI
// defines delegation: the calling plugin's CNI_CONTAINERID, CNI_NETNS,
// CNI_ARGS and CNI_PATH, CNI_IFNAME = the pod-side RDMA interface, and the
// calling plugin's own conf on stdin (prevResult is removed before use).
type Request struct {
	PluginType  string // ipam.type
	NetConf     []byte // stdin for the IPAM plugin
	ContainerID string
	NetNS       string
	IfName      string // pod-side RDMA interface
	Args        string // CNI_ARGS
	Path        string // CNI_PATH (colon separated)
}

// IPAM allocates and releases addresses for a pod-side RDMA interface.
type IPAM interface {
	// Add allocates addresses for r.IfName and returns them as a 1.0.0 result.
	Add(ctx context.Context, r Request) (*types100.Result, error)
	// Del releases what Add allocated; a repeated Del succeeds.
	Del(ctx context.Context, r Request) error
	// GC delegates CNI 1.1 GC with valid as cni.dev/valid-attachments when
	// the IPAM supports it (its VERSION lists 1.1.0 or later and the conf is
	// 1.1.0 or later); otherwise it does nothing.
	GC(ctx context.Context, r Request, valid []types.GCAttachment) error
}

// gcKey is the netconf key that carries the valid attachments on GC.
const gcKey = "cni.dev/valid-attachments"

// execIPAM runs IPAM plugin binaries through pkg/invoke.
type execIPAM struct {
	exec invoke.Exec // nil: pkg/invoke's default exec and invoke.FindInPath
}

// Exec returns the IPAM that executes the real plugin binary found in
// Request.Path, with explicit CNI arguments (nothing is read from the
// process environment for CNI_*).
func Exec() IPAM { return &execIPAM{} }

// Add runs the IPAM plugin's ADD and converts its result to 1.0.0.
func (e *execIPAM) Add(ctx context.Context, r Request) (*types100.Result, error) {
	path, stdin, err := e.prepare(r, nil, false)
	if err != nil {
		return nil, err
	}
	var res *types100.Result
	raw, err := invoke.ExecPluginWithResult(ctx, path, stdin, buildArgs("ADD", r), e.exec)
	if err == nil {
		err = nullEntry(raw)
	}
	if err == nil {
		res, err = types100.NewResultFromResult(raw)
	}
	if err != nil {
		var pluginErr *types.Error
		if !errors.As(err, &pluginErr) {
			// The plugin may have allocated but its answer is unusable:
			// release best effort rather than leak the lease.
			_ = e.Del(ctx, r)
		}
		return nil, fmt.Errorf("IPAM %s ADD for %s: %w", r.PluginType, r.IfName, err)
	}
	return res, nil
}

// nullEntry rejects an IPAM result holding a null interface, IP or route: the
// CNI library's conversion from 0.3.x/0.4.0 dereferences them (a panic), and
// at every version they are malformed. The IPAM plugin is outside the
// plugin's trust, so its answer is checked here.
func nullEntry(raw types.Result) error {
	var lists map[string]bool
	switch r := raw.(type) {
	case *types040.Result:
		lists = map[string]bool{"interfaces": hasNil(r.Interfaces), "ips": hasNil(r.IPs), "routes": hasNil(r.Routes)}
	case *types100.Result:
		lists = map[string]bool{"interfaces": hasNil(r.Interfaces), "ips": hasNil(r.IPs), "routes": hasNil(r.Routes)}
	}
	for _, name := range []string{"interfaces", "ips", "routes"} {
		if lists[name] {
			return fmt.Errorf("result has a null entry in %q", name)
		}
	}
	return nil
}

func hasNil[T any](list []*T) bool { return slices.Contains(list, nil) }

// Del runs the IPAM plugin's DEL.
func (e *execIPAM) Del(ctx context.Context, r Request) error {
	path, stdin, err := e.prepare(r, nil, false)
	if err != nil {
		return err
	}
	if err := invoke.ExecPluginWithoutResult(ctx, path, stdin, buildArgs("DEL", r), e.exec); err != nil {
		return fmt.Errorf("IPAM %s DEL for %s: %w", r.PluginType, r.IfName, err)
	}
	return nil
}

// GC runs the IPAM plugin's GC when it supports it.
func (e *execIPAM) GC(ctx context.Context, r Request, valid []types.GCAttachment) error {
	path, stdin, err := e.prepare(r, valid, true)
	if err != nil {
		return err
	}
	info, err := invoke.GetVersionInfo(ctx, path, e.exec)
	if err != nil {
		return fmt.Errorf("IPAM %s VERSION: %w", r.PluginType, err)
	}
	if !gcApplies(info, r.NetConf) {
		return nil
	}
	if err := invoke.ExecPluginWithoutResult(ctx, path, stdin, buildArgs("GC", r), e.exec); err != nil {
		return fmt.Errorf("IPAM %s GC: %w", r.PluginType, err)
	}
	return nil
}

// prepare finds the plugin binary and builds its stdin.
func (e *execIPAM) prepare(r Request, valid []types.GCAttachment, gc bool) (string, []byte, error) {
	path, err := e.find(r)
	if err != nil {
		return "", nil, err
	}
	stdin, err := delegateConf(r.NetConf, valid, gc)
	if err != nil {
		return "", nil, err
	}
	return path, stdin, nil
}

// find locates the IPAM binary in r.Path.
func (e *execIPAM) find(r Request) (string, error) {
	dirs := filepath.SplitList(r.Path)
	var (
		path string
		err  error
	)
	if e.exec != nil {
		path, err = e.exec.FindInPath(r.PluginType, dirs)
	} else {
		path, err = invoke.FindInPath(r.PluginType, dirs)
	}
	if err != nil {
		return "", fmt.Errorf("find IPAM plugin %q in CNI_PATH %q: %w: %w", r.PluginType, r.Path, ErrPluginNotFound, err)
	}
	return path, nil
}

// ErrPluginNotFound means the IPAM plugin's binary is not in CNI_PATH. It
// cannot have been run, so it holds no lease of this call's.
var ErrPluginNotFound = errors.New("IPAM plugin not found")

// buildArgs maps r to explicit CNI arguments for command cmd.
func buildArgs(cmd string, r Request) *invoke.Args {
	return &invoke.Args{
		Command:       cmd,
		ContainerID:   r.ContainerID,
		NetNS:         r.NetNS,
		PluginArgsStr: r.Args,
		IfName:        r.IfName,
		Path:          r.Path,
	}
}

// delegateConf returns netconf without prevResult; for GC it sets the valid
// attachments (an empty list releases everything).
func delegateConf(netconf []byte, valid []types.GCAttachment, gc bool) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(netconf, &m); err != nil {
		return nil, fmt.Errorf("decode IPAM netconf: %w", err)
	}
	if m == nil {
		return nil, errors.New("IPAM netconf is null, want a JSON object")
	}
	delete(m, "prevResult")
	if gc {
		if valid == nil {
			valid = []types.GCAttachment{}
		}
		v, err := json.Marshal(valid)
		if err != nil {
			return nil, fmt.Errorf("encode valid attachments: %w", err)
		}
		m[gcKey] = v
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode IPAM netconf: %w", err)
	}
	return out, nil
}

// gcApplies reports whether a GC can be delegated: the plugin's VERSION
// lists 1.1.0 or later and the conf's cniVersion is 1.1.0 or later (skel
// rejects GC for older confs).
func gcApplies(info version.PluginInfo, netconf []byte) bool {
	conf, err := (&version.ConfigDecoder{}).Decode(netconf)
	if err != nil || !atLeast(conf, "1.1.0") {
		return false
	}
	for _, v := range info.SupportedVersions() {
		if atLeast(v, "1.1.0") {
			return true
		}
	}
	return false
}

// atLeast reports whether version v >= min; unparsable versions are not.
func atLeast(v, min string) bool {
	ok, err := version.GreaterThanOrEqualTo(v, min)
	return err == nil && ok
}
