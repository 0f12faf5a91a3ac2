package ops

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// report is `inspect --json` as docs/operations.md documents schema 1:
// the test's own reading of it, not the product's types, so that a
// renamed or dropped field fails here.
type report struct {
	SchemaVersion int `json:"schemaVersion"`
	RDMA          struct {
		Mode    string   `json:"mode"`
		Devices []device `json:"devices"`
	} `json:"rdma"`
	SMC struct {
		Available bool      `json:"available"`
		Reason    string    `json:"reason"`
		Pnet      []pnetRow `json:"pnet"`
		UEIDs     []string  `json:"ueids"`
	} `json:"smc"`
	Attachments []attachment `json:"attachments"`
	Failures    []failure    `json:"lastFailures"`
	Netns       *struct {
		Path       string            `json:"path"`
		Interfaces []iface           `json:"interfaces"`
		Pnet       []pnetRow         `json:"pnet"`
		SMCSysctls map[string]string `json:"smcSysctls"`
		Fallbacks  json.RawMessage   `json:"smcFallbacks"`
	} `json:"netns"`
	Unreadable []struct {
		What  string `json:"what"`
		Error string `json:"error"`
	} `json:"unreadable"`
}

type device struct {
	Name   string `json:"name"`
	Driver string `json:"driver"`
	Netdev string `json:"netdev"`
	Netns  string `json:"netns"`
	Ports  []struct {
		Port  int    `json:"port"`
		State string `json:"state"`
	} `json:"ports"`
}

type pnetRow struct {
	PnetID string `json:"pnetId"`
	Eth    string `json:"eth"`
	IB     string `json:"ib"`
	IBPort int    `json:"ibPort"`
}

type attachment struct {
	Pod     string `json:"pod"`
	Mode    string `json:"mode"`
	NetNS   string `json:"netns"`
	DataDir string `json:"dataDir"`
	Links   []struct {
		Device  string   `json:"device"`
		Kind    string   `json:"kind"`
		PodName string   `json:"podName"`
		Host    string   `json:"host"`
		IPs     []string `json:"ips"`
		Step    string   `json:"step"`
	} `json:"links"`
	SMCR     string        `json:"smcr"`
	Healthy  bool          `json:"healthy"`
	Problems []string      `json:"problems"`
	Usage    []deviceUsage `json:"rdmaUsage"`
}

type failure struct {
	Verb string `json:"verb"`
	Pod  string `json:"pod"`
	Code int    `json:"code"`
	Msg  string `json:"msg"`
}

type iface struct {
	Name  string     `json:"name"`
	Kind  string     `json:"kind"`
	MAC   string     `json:"mac"`
	Up    bool       `json:"up"`
	Addrs []string   `json:"addrs"`
	RDMA  bool       `json:"rdma"`
	GIDs  []rdma.GID `json:"gids"`
}

// inspected is one `inspect` of the node: its text (what an operator
// reads) and its JSON (--json, the same arguments), decoded.
type inspected struct {
	text, json guestkit.OpsRun
	r          report
	err        error // the JSON run failed or did not decode
}

// inspect runs `inspect args` and `inspect --json args` (with env); the
// text run is logged line by line under label, the JSON run on one line
// under label-json.
func inspect(t *testing.T, label string, env []string, args ...string) inspected {
	t.Helper()
	return inspectVia(t, label, nil, env, args...)
}

// inspectVia is inspect with the binary started by the wrapper via
// (guestkit.RunOpsVia).
func inspectVia(t *testing.T, label string, via, env []string, args ...string) inspected {
	t.Helper()
	in := inspected{text: guestkit.RunOpsVia(t, label, via, env, append([]string{"inspect"}, args...)...)}
	in.json = guestkit.RunOpsQuietVia(t, label+"-json", via, env, append([]string{"inspect", "--json"}, args...)...)
	in.err = in.json.Err
	if in.err == nil {
		if err := json.Unmarshal([]byte(in.json.Stdout), &in.r); err != nil {
			in.err = fmt.Errorf("%s: its JSON: %w: %s", in.json.Command(), err, in.json.Stdout)
		}
	}
	return in
}

// exit checks that both runs exited with code (inspect: 1 when it found
// a problem).
func (in inspected) exit(code int) error { return errors.Join(in.text.Exit(code), in.json.Exit(code)) }

// attachment is the report's attachment of pod (namespace/name).
func (in inspected) attachment(pod string) (attachment, error) {
	if in.err != nil {
		return attachment{}, in.err
	}
	for _, a := range in.r.Attachments {
		if a.Pod == pod {
			return a, nil
		}
	}
	return attachment{}, fmt.Errorf("inspect --json lists no attachment of %s: %+v", pod, in.r.Attachments)
}

// device is the report's RDMA device name in init_net.
func (in inspected) device(name string) (device, error) {
	if in.err != nil {
		return device{}, in.err
	}
	for _, d := range in.r.RDMA.Devices {
		if d.Name == name {
			return d, nil
		}
	}
	return device{}, fmt.Errorf("inspect --json lists no RDMA device %s: %+v", name, in.r.RDMA.Devices)
}

// netnsIface is the --netns part's interface name.
func (in inspected) netnsIface(path, name string) (iface, error) {
	if in.err != nil {
		return iface{}, in.err
	}
	if in.r.Netns == nil || in.r.Netns.Path != path {
		return iface{}, fmt.Errorf("inspect --json has no netns %s: %+v", path, in.r.Netns)
	}
	for _, i := range in.r.Netns.Interfaces {
		if i.Name == name {
			return i, nil
		}
	}
	return iface{}, fmt.Errorf("inspect --json lists no %s in %s: %+v", name, path, in.r.Netns.Interfaces)
}

// healthy checks that both outputs have every attachment whole and
// everything read (no PROBLEM line, exit 0).
func (in inspected) healthy() error {
	err := errors.Join(in.text.Lacks("PROBLEM"), in.exit(0), in.err)
	if err != nil {
		return err
	}
	for _, a := range in.r.Attachments {
		if !a.Healthy {
			return fmt.Errorf("attachment of %s not healthy: %q", a.Pod, a.Problems)
		}
	}
	if len(in.r.Unreadable) > 0 {
		return fmt.Errorf("inspect could not read: %+v", in.r.Unreadable)
	}
	return nil
}

// stale checks that the attachment of pod is reported broken because
// its netns is gone, and inspect exits 1.
func (in inspected) stale(pod, netns string) error {
	problem := "netns " + netns + " is gone"
	if err := errors.Join(in.text.Has("PROBLEM: "+problem), in.exit(1)); err != nil {
		return err
	}
	a, err := in.attachment(pod)
	if err != nil {
		return err
	}
	if a.Healthy || !slices.ContainsFunc(a.Problems, func(p string) bool { return strings.HasPrefix(p, problem) }) {
		return fmt.Errorf("attachment of %s: healthy %v, problems %q; want %q", pod, a.Healthy, a.Problems, problem)
	}
	return nil
}

// hasGID checks that i carries gid of dev port 1 as RoCE v2.
func hasGID(i iface, dev, gid string) error {
	for _, g := range i.GIDs {
		if g.Device == dev && g.Port == 1 && g.GID == gid && g.Type == "RoCE v2" {
			return nil
		}
	}
	return fmt.Errorf("%s lists no RoCE v2 GID %s of %s port 1: %+v", i.Name, gid, dev, i.GIDs)
}

// writeConflist writes list to path and makes it the one c's calls use:
// the runtime's calls and the operator commands read the same file.
func writeConflist(t *testing.T, c *guestkit.Calls, path string, conf []byte) bool {
	t.Helper()
	err := os.MkdirAll(filepath.Dir(path), 0o755)
	if err == nil {
		err = os.WriteFile(path, conf, 0o644)
	}
	if err == nil {
		c.List, err = libcni.ConfListFromFile(path)
	}
	if err != nil {
		t.Errorf("conflist %s: %v", path, err)
		return false
	}
	t.Logf("conflist: %s", strings.ReplaceAll(string(conf), "\n", ""))
	return true
}

// released checks that reconcile's log has the release of pod's
// attachment (what says its record: "(pod NS/NAME, MODE, LINKS)")
// because its netns is gone, and a pass summary with pass's fields.
func released(run guestkit.OpsRun, msg, what, netns string, pass map[string]string) error {
	if run.Err != nil {
		return run.Err
	}
	recs := guestkit.LogRecords(run.Output())
	if msg != "" {
		r, err := guestkit.FindRecord(recs, msg, nil)
		if err != nil {
			return err
		}
		if err := releaseOf(r, what, "netns "+netns+" is gone"); err != nil {
			return err
		}
	}
	_, err := guestkit.FindRecord(recs, "pass done", pass)
	return err
}

// releaseOf checks that a released or repaired record names the
// attachment (rdmanet/CONTAINER/IFNAME followed by what) and that its
// why starts with why.
func releaseOf(r guestkit.LogRecord, what, why string) error {
	if a := r["attachment"]; !strings.HasPrefix(a, "rdmanet/") || !strings.HasSuffix(a, " "+what) {
		return fmt.Errorf("%s: attachment %q, want rdmanet/... %s", r["msg"], a, what)
	}
	if !strings.HasPrefix(r["why"], why) {
		return fmt.Errorf("%s: why %q, want %q...", r["msg"], r["why"], why)
	}
	return nil
}

// hasAddrs checks that netdev name in init_net has every cidr.
func hasAddrs(name string, cidrs ...string) error {
	for _, c := range cidrs {
		if err := guestkit.HasAddr(name, c); err != nil {
			return err
		}
	}
	return nil
}

// entryAfterPtp checks that conf (what install wrote) is the primary's
// ptp and then the rdma-chain entry with the keys install set.
func entryAfterPtp(conf []byte) error {
	var l struct {
		Plugins []struct {
			Type       string `json:"type"`
			Mode       string `json:"mode"`
			SharedLink struct {
				Type string `json:"type"`
			} `json:"sharedLink"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(conf, &l); err != nil {
		return fmt.Errorf("the installed conflist: %w: %s", err, conf)
	}
	p := l.Plugins
	if len(p) != 2 || p[0].Type != "ptp" || p[1].Type != "rdma-chain" || p[1].Mode != "shared" || p[1].SharedLink.Type != "none" {
		return fmt.Errorf("installed conflist %s; want ptp, then rdma-chain with mode shared and sharedLink none", conf)
	}
	return nil
}
