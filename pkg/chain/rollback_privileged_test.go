package chain

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// fault fails the nth call of one kernel step: before it runs, or after it
// made its change (a step that fails half way).
type fault struct {
	step  string
	nth   int
	after bool
	seen  map[string]int
}

var errInjected = errors.New("injected")

func (f *fault) run(step string, do func() error) error {
	f.seen[step]++
	if step != f.step || f.seen[step] != f.nth {
		return do()
	}
	if f.after {
		if err := do(); err != nil {
			return err
		}
	}
	return errInjected
}

type faultyLinks struct {
	Links
	f *fault
}

func (l faultyLinks) Describe(host, pod string) (hl state.HostLink, err error) {
	err = l.f.run("Describe", func() error { hl, err = l.Links.Describe(host, pod); return err })
	return hl, err
}

func (l faultyLinks) MoveToPod(hl state.HostLink, podNS ns.NetNS) error {
	return l.f.run("MoveToPod", func() error { return l.Links.MoveToPod(hl, podNS) })
}

// AddChild failing after the child was made names it, as netdev.AddChild
// does for a child it created but could not read back.
func (l faultyLinks) AddChild(spec netdev.ChildSpec, podNS ns.NetNS) (c netdev.Child, err error) {
	err = l.f.run("AddChild", func() error { c, err = l.Links.AddChild(spec, podNS); return err })
	return c, err
}

type faultyIPAM struct {
	addr.IPAM
	f *fault
}

func (i faultyIPAM) Add(ctx context.Context, r addr.Request) (res *types100.Result, err error) {
	err = i.f.run("IPAMAdd", func() error { res, err = i.IPAM.Add(ctx, r); return err })
	return res, err
}

type faultyAddrs struct {
	Addressing
	f *fault
}

func (a faultyAddrs) Configure(podNS ns.NetNS, ifName string, res *types100.Result, opts addr.Options) error {
	return a.f.run("Configure", func() error { return a.Addressing.Configure(podNS, ifName, res, opts) })
}

// TestFailedAddLeavesNodeAsBefore checks that a failure at each step of ADD,
// before or after the step's own change, leaves the node as it was: the host
// netdev exactly restored (addresses, routes, MTU, state), the pod netns
// empty, the host-local lease released, no device-info file, pnet entry,
// hook listing or record. The kernel steps are real; RDMA and SMC stay
// behind the fake seam (this kernel has neither: their failures come from
// the world).
func TestFailedAddLeavesNodeAsBefore(t *testing.T) {
	testenv.Privileged(t)
	cases := []struct {
		mode  rdma.Mode
		step  string
		nth   int
		after bool
		code  uint
	}{
		{rdma.ModeExclusive, "Describe", 1, false, CodeLinkSetup},
		{rdma.ModeExclusive, "MoveToPod", 1, false, CodeLinkSetup},
		{rdma.ModeExclusive, "MoveToPod", 1, true, CodeLinkSetup},
		{rdma.ModeExclusive, "MoveToNetns", 1, false, CodeLinkSetup},
		{rdma.ModeExclusive, "IPAMAdd", 1, false, CodeIPAM},
		{rdma.ModeExclusive, "IPAMAdd", 1, true, CodeIPAM},
		{rdma.ModeExclusive, "Configure", 1, true, CodeLinkSetup},
		{rdma.ModeExclusive, "EnsurePnet", 1, false, CodeSMC},
		{rdma.ModeExclusive, "EnsurePnet", 2, false, CodeSMC},
		{rdma.ModeExclusive, "HookAdd", 1, false, CodeSMC},
		{rdma.ModeExclusive, "EnsureUEID", 1, false, CodeSMC},
		{rdma.ModeShared, "AddChild", 1, false, CodeLinkSetup},
		{rdma.ModeShared, "AddChild", 1, true, CodeLinkSetup},
		{rdma.ModeShared, "IPAMAdd", 1, true, CodeIPAM},
		{rdma.ModeShared, "Configure", 1, true, CodeLinkSetup},
		{rdma.ModeShared, "EnsurePnet", 2, false, CodeSMC},
		{rdma.ModeShared, "HookAdd", 1, false, CodeSMC},
	}
	for _, tc := range cases {
		when := "before"
		if tc.after {
			when = "after"
		}
		t.Run(fmt.Sprintf("%s/%s#%d/%s", tc.mode, tc.step, tc.nth, when), func(t *testing.T) {
			n := newNode(t, tc.mode)
			n.cniPath = filepath.Dir(testenv.RequireBinary(t, "host-local", testenv.ToolsDir("cni", "bin")))
			n.w.devices[0].PCI = "0000:3b:00.0"
			n.w.failOn = map[string]error{tc.step: errInjected}
			n.w.failNth = map[string]int{tc.step: tc.nth}
			f := &fault{step: tc.step, nth: tc.nth, after: tc.after, seen: map[string]int{}}
			n.wrap = func(p *Plugin) {
				p.env.Links = faultyLinks{p.env.Links, f}
				p.env.IPAM, p.env.Addrs = faultyIPAM{p.env.IPAM, f}, faultyAddrs{p.env.Addrs, f}
			}
			leases, devInfo := t.TempDir(), filepath.Join(n.dir, "devinfo", "net1.json")
			conf := `,"podSelection":"all","sharedLink":{"type":"macvlan"},` +
				`"ipam":{"type":"host-local","dataDir":"` + leases + `","ranges":[[{"subnet":"fd00:77::/64","rangeStart":"fd00:77::10"}]]},` +
				`"smcr":{"onUnsupported":"fail","transparent":"bpf","ueid":"RDMACHAIN"},` +
				`"runtimeConfig":{"CNIDeviceInfoFile":"` + devInfo + `",` +
				`"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}}`
			pod := netnstest.NewNS(t)
			wantCode(t, n.run(add, pod, conf, prevResult100), tc.code, "injected")
			if f.seen[tc.step] < tc.nth && n.w.counts[tc.step] < tc.nth {
				t.Fatalf("step %s#%d never ran: %v", tc.step, tc.nth, n.w.calls)
			}
			n.assertHostRestored(t)
			if got := netnstest.Names(t, pod); !reflect.DeepEqual(got, []string{"lo"}) {
				t.Errorf("pod keeps %v", got)
			}
			if leaseCount(t, leases) != 0 {
				t.Error("lease kept")
			}
			assertFile(t, devInfo, "", "after the failed ADD")
			for netns, entries := range n.w.pnet {
				if len(entries) != 0 {
					t.Errorf("pnet entries left in netns %q: %v", netns, entries)
				}
			}
			if len(n.w.hooked) != 0 {
				t.Errorf("netns left in the socket hook: %v", n.w.hooked)
			}
			if files := stateFiles(t, n.dir); len(files) != 0 {
				t.Errorf("state left: %v", files)
			}
		})
	}
}
