package chain

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/syncbuf"
	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// fakeSMC keeps pnet tables the way the kernel does: one entry per netdev
// or IB port per netns; a second PNETID for the same target conflicts.
type fakeSMC world

func (f *fakeSMC) w() *world { return (*world)(f) }

func (f *fakeSMC) EnsurePnet(ns string, e smc.PnetEntry) (smc.PnetEntry, error) {
	if err := f.w().record("EnsurePnet %q %s", ns, e); err != nil {
		return smc.PnetEntry{}, err
	}
	if f.pnet == nil {
		f.pnet = map[string][]smc.PnetEntry{}
	}
	for _, x := range f.pnet[ns] {
		if x.EthName == e.EthName && x.IBName == e.IBName {
			if x.PnetID != e.PnetID {
				return x, &smc.ConflictError{Existing: x}
			}
			return x, nil
		}
	}
	f.pnet[ns] = append(f.pnet[ns], e)
	return e, nil
}

func (f *fakeSMC) RemovePnet(ns string, e smc.PnetEntry) error {
	if err := f.w().record("RemovePnet %q %s", ns, e); err != nil {
		return err
	}
	if f.pnet == nil {
		f.pnet = map[string][]smc.PnetEntry{}
	}
	var keep []smc.PnetEntry
	for _, x := range f.pnet[ns] {
		if x.PnetID != e.PnetID {
			keep = append(keep, x)
		}
	}
	f.pnet[ns] = keep
	return nil
}

func (f *fakeSMC) PnetEntries(ns string) ([]smc.PnetEntry, error) {
	return f.pnet[ns], f.w().failOn["PnetEntries"]
}

func (f *fakeSMC) EnsureUEID(ueid string) error { return f.w().record("EnsureUEID %s", ueid) }

func (f *fakeSMC) TCP2SMC(ns string) (bool, error) {
	err := f.w().record("TCP2SMC %s", ns)
	return f.tcp2smc && err == nil, err
}

func (f *fakeSMC) HookSupported(dir string) error { return f.w().record("HookSupported %s", dir) }

func (f *fakeSMC) Offer(dir string) smc.Offer {
	_ = f.w().record("Offer %s", dir)
	return f.offer
}

func (f *fakeSMC) HookAdd(dir string, ino uint64) (bool, error) {
	if err := f.w().record("HookAdd %d", ino); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hooked == nil {
		f.hooked = map[uint64]bool{}
	}
	loaded := len(f.hooked) == 0
	f.hooked[ino] = true
	return loaded, nil
}

func (f *fakeSMC) HookRemove(dir string, ino uint64) error {
	if err := f.w().record("HookRemove %d", ino); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.hooked, ino)
	return nil
}

func (f *fakeSMC) HookListed(dir string, ino uint64) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hooked[ino], nil
}

// world is a fake node: it records every seam call in order and fails the
// call whose name is in failOn.
type world struct {
	mu         sync.Mutex
	mode       rdma.Mode
	modeErr    error
	devices    []rdma.Device
	devicesNow []rdma.Device // what Devices lists from its second call on, when set
	allocs     []podres.Allocation
	claims     []podres.ClaimDevice // DRA devices of the served drivers
	foreign    []podres.ClaimDevice // DRA devices of other drivers
	podErr     error
	podUnknown bool // pod-resources answers that kubelet does not know the pod
	failOn     map[string]error
	netnsLocal map[string]string // netdev -> why it cannot leave the host netns
	uplinks    map[string]string // host netdev -> the node traffic it carries
	prefixes   map[string][]netip.Prefix
	ipamConfs  []string       // "ADD|DEL IFNAME STDIN" of every IPAM call
	failNth    map[string]int // fail only that call of failOn's name (1-based)
	counts     map[string]int
	calls      []string
	pnet       map[string][]smc.PnetEntry // SMC pnet tables by netns ("" = host)
	gone       map[string]bool            // pod netns paths that no longer exist
	cookieBump map[string]uint64          // a netns path now names another netns (same inode)
	onIPAM     func()                     // runs inside every IPAM ADD
	onDevices  func()                     // runs inside every Devices
	onIPAMDel  func()                     // runs after every IPAM DEL's release
	onRestore  func()                     // runs after every RestoreToHost
	tcp2smc    bool                       // the kernel has net.smc.tcp2smc
	offer      smc.Offer                  // what STATUS's probe finds
	childLeft  bool                       // a failed AddChild created its child (not read back)
	childNsid  bool                       // AddChild gives its child nsid 7 and ifindex 1048579
	hooked     map[uint64]bool            // netns inodes listed in the SMC socket hook
	gids       map[string][2]int          // RDMA device -> free rows and size of port 1's GID table
	bootIDPath string                     // Env.BootIDPath ("": the kernel's)
	stuck      map[string]bool            // RDMA devices a live netns without a path keeps
	returnWait time.Duration              // how long ReturnToHost waits for a stuck device
	noRxe      string                     // why the kernel cannot make an rxe device in a pod netns
	stdout     syncbuf.Buffer
	stderr     syncbuf.Buffer
}

// fakeSoftRoCE makes and deletes rxe devices in the world's device list,
// as the kernel's shared mode lists every netns's devices.
type fakeSoftRoCE world

func (f *fakeSoftRoCE) w() *world { return (*world)(f) }

func (f *fakeSoftRoCE) Unsupported() string { return f.noRxe }

func (f *fakeSoftRoCE) Add(nsPath, name, netdev string) error {
	if err := f.w().record("RxeAdd %s %s %s", name, nsPath, netdev); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.devices = append(f.devices, rxe(name, netdev))
	return nil
}

func (f *fakeSoftRoCE) Del(name string) error {
	if err := f.w().record("RxeDel %s", name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.devices = slices.DeleteFunc(f.devices, func(d rdma.Device) bool { return d.Name == name })
	return nil
}

func (f *fakeSoftRoCE) NetdevPCI(netdev string) string { return "0000:00:03.0" }

func (w *world) record(format string, args ...any) error {
	call := fmt.Sprintf(format, args...)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, call)
	name, _, _ := strings.Cut(call, " ")
	if w.counts == nil {
		w.counts = map[string]int{}
	}
	w.counts[name]++
	if n := w.failNth[name]; n != 0 && n != w.counts[name] {
		return nil
	}
	return w.failOn[name]
}

func (w *world) NetnsMode() (rdma.Mode, error) { w.record("NetnsMode"); return w.mode, w.modeErr }
func (w *world) Devices() ([]rdma.Device, error) {
	err := w.record("Devices")
	if w.onDevices != nil {
		w.onDevices()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.devicesNow != nil && w.counts["Devices"] > 1 {
		return w.devicesNow, err
	}
	return w.devices, err
}
func (w *world) CheckMovable(rdma.Device) error { return w.failOn["CheckMovable"] }
func (w *world) FreeGIDs(dev string, port, want int) (free, size int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.gids[dev]
	return min(g[0], want), g[1], w.failOn["FreeGIDs"]
}
func (w *world) MoveToNetns(dev string, _ int) error { return w.record("MoveToNetns %s", dev) }
func (w *world) ReturnToHost(dev, nsPath string) error {
	if err := w.record("ReturnToHost %s %s", dev, nsPath); err != nil {
		return err
	}
	w.mu.Lock()
	stuck, wait := w.stuck[dev], w.returnWait
	w.mu.Unlock()
	if stuck {
		time.Sleep(wait) // as rdma.System.ReturnToHost polls for it
		return fmt.Errorf("RDMA device %s not back on the host within %v", dev, wait)
	}
	return nil
}

func (w *world) InNetns(dev, nsPath string) (bool, error) {
	err := w.record("InNetns %s %s", dev, nsPath)
	return err == nil, nil
}

func (w *world) NetnsLocal(name string) (string, error) {
	return w.netnsLocal[name], w.failOn["NetnsLocal"]
}

func (w *world) NodeUplinks([]netip.Addr) (map[string]string, error) {
	return w.uplinks, w.failOn["NodeUplinks"]
}

func (w *world) Describe(host, pod string) (state.HostLink, error) {
	err := w.record("Describe %s %s", host, pod)
	return state.HostLink{HostName: host, PodName: pod, MAC: "02:00:00:00:00:01", MTU: 1500, WasUp: true}, err
}

func (w *world) MoveToPod(hl state.HostLink, podNS ns.NetNS) error {
	return w.record("MoveToPod %s %s", hl.HostName, hl.PodName)
}
func (w *world) RestoreToHost(l state.HostLink, nsPath string) error {
	err := w.record("RestoreToHost %s %s", l.HostName, nsPath)
	if err == nil && w.onRestore != nil {
		w.onRestore()
	}
	return err
}
func (w *world) AddChild(spec netdev.ChildSpec, _ ns.NetNS) (netdev.Child, error) {
	if err := w.record("AddChild %s %s %s %s", spec.Kind, spec.Mode, spec.Parent, spec.PodName); err != nil {
		if w.childLeft {
			return netdev.Child{Name: spec.PodName}, err
		}
		return netdev.Child{}, err
	}
	c := netdev.Child{Name: spec.PodName, MAC: "02:00:00:00:00:0" + spec.PodName[len(spec.PodName)-1:], MTU: 1450}
	if w.childNsid {
		c.NetnsID, c.Index = new(int32(7)), 1048579
	}
	return c, nil
}
func (w *world) DelChild(nsPath, name, mac string) error {
	return w.record("DelChild %s %s %s", nsPath, name, mac)
}
func (w *world) DelChildByID(id netdev.ChildID, mac string) error {
	return w.record("DelChildByID %d/%d %s", id.NetnsID, id.Index, mac)
}
func (w *world) CheckInPod(nsPath, name, mac string) error {
	return w.record("CheckInPod %s %s %s", nsPath, name, mac)
}
func (w *world) Lookup(_ context.Context, socket, namespace, name string, _ podres.Query) (*podres.Pod, error) {
	w.record("Lookup %s %s/%s", socket, namespace, name)
	if w.podErr != nil {
		return nil, w.podErr
	}
	return &podres.Pod{Known: !w.podUnknown, Devices: w.allocs, Claims: w.claims, Foreign: w.foreign}, nil
}
func (w *world) Probe(_ context.Context, socket string) error { return w.record("Probe %s", socket) }
func (w *world) Serving(_ context.Context, socket string) error {
	return w.record("Serving %s", socket)
}

// Add is the IPAM fake: it hands out fd00:77::N/64 per interface.
func (w *world) Add(_ context.Context, r addr.Request) (*types100.Result, error) {
	if err := w.record("IPAMAdd %s %s", r.ContainerID, r.IfName); err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.ipamConfs = append(w.ipamConfs, "ADD "+r.IfName+" "+string(r.NetConf))
	w.mu.Unlock()
	if w.onIPAM != nil {
		w.onIPAM()
	}
	ip, _ := types.ParseCIDR("fd00:77::" + r.IfName[len(r.IfName)-1:] + "5/64")
	gw := net.ParseIP("fd00:77::1")
	_, dst, _ := net.ParseCIDR("fd00:88::/64")
	return &types100.Result{CNIVersion: "1.0.0",
		IPs:    []*types100.IPConfig{{Address: *ip, Gateway: gw}},
		Routes: []*types.Route{{Dst: *dst, GW: gw}}}, nil
}
func (w *world) Del(_ context.Context, r addr.Request) error {
	w.mu.Lock()
	w.ipamConfs = append(w.ipamConfs, "DEL "+r.IfName+" "+string(r.NetConf))
	w.mu.Unlock()
	err := w.record("IPAMDel %s %s", r.ContainerID, r.IfName)
	if w.onIPAMDel != nil {
		w.onIPAMDel()
	}
	return err
}
func (w *world) GC(_ context.Context, _ addr.Request, valid []types.GCAttachment) error {
	return w.record("IPAMGC %v", valid)
}
func (w *world) Configure(_ ns.NetNS, ifName string, res *types100.Result, opts addr.Options) error {
	return w.record("Configure %s %s dad=%v", ifName, res.IPs[0].Address.String(), opts.DAD)
}
func (w *world) Prefixes(netdev string) ([]netip.Prefix, error) {
	return w.prefixes[netdev], w.failOn["Prefixes"]
}
func (w *world) HostRouteWarning(parent string, _ []*types100.IPConfig) string {
	w.record("HostRouteWarning %s", parent)
	return ""
}

func (w *world) plugin() *Plugin {
	return New(Env{
		RDMA: w, Links: w, IPAM: w, Addrs: w, SMC: (*fakeSMC)(w), PodResources: w,
		Netns:      (*fakeNetns)(w),
		SoftRoCE:   (*fakeSoftRoCE)(w),
		BootIDPath: w.bootIDPath,
		Stdout:     &w.stdout, Stderr: &w.stderr,
	})
}

// fakeNetns opens every path as a fakeNS; a path in w.gone names no netns,
// and w.cookieBump gives a path's netns another cookie (same inode).
type fakeNetns world

func (f *fakeNetns) Open(p string) (ns.NetNS, error) {
	if err := (*world)(f).record("OpenNS %s", p); err != nil {
		return nil, err
	}
	return fakeNS(p), nil
}

func (f *fakeNetns) ID(p string) (netnsid.ID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone[p] {
		return netnsid.ID{}, fmt.Errorf("%s: %w", p, netnsid.ErrGone)
	}
	return netnsid.ID{Inode: 4026532000, Cookie: 7 + f.cookieBump[p]}, nil
}

func (f *fakeNetns) Own(p string) (bool, error) { return p == "/proc/1/ns/net", nil }

// fakeNS is a pod netns path that is never entered.
type fakeNS string

func (f fakeNS) Do(func(ns.NetNS) error) error {
	return fmt.Errorf("fake netns %s cannot be entered", f)
}
func (f fakeNS) Set() error   { return fmt.Errorf("fake netns") }
func (f fakeNS) Path() string { return string(f) }
func (f fakeNS) Fd() uintptr  { return 42 }
func (f fakeNS) Close() error { return nil }

// rxe returns a soft-RoCE style device on netdev.
func rxe(name, netdev string) rdma.Device {
	return rdma.Device{Name: name, Driver: "rdma_rxe", Netdev: netdev, NodeGUID: "0000:0000:0000:0001"}
}

// erdma returns an eRDMA device whose GUID derives from mac.
func erdma(t *testing.T, name, netdev, mac string) rdma.Device {
	t.Helper()
	hw, _ := net.ParseMAC(mac)
	guid, err := rdma.GUIDFromMAC(hw)
	if err != nil {
		t.Fatal(err)
	}
	return rdma.Device{Name: name, Driver: "erdma", Netdev: netdev, NodeGUID: guid}
}

const prevResult100 = `{"cniVersion":"1.0.0","interfaces":[{"name":"veth1","mac":"aa:bb:cc:dd:ee:01"},
	{"name":"eth0","mac":"00:16:3e:01:02:03","sandbox":"/var/run/netns/pod"}],
	"ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1","interface":1}],
	"routes":[{"dst":"0.0.0.0/0"}],"dns":{}}`

// cmd builds skel args for conf (without closing brace) and prevResult.
func cmd(dataDir, conf, prev string) *skel.CmdArgs {
	stdin := `{"cniVersion":"1.0.0","name":"rdmanet","type":"rdma-chain","dataDir":"` + dataDir + `"` + conf
	if prev != "" {
		stdin += `,"prevResult":` + prev
	}
	return &skel.CmdArgs{
		ContainerID: "c1", Netns: "/var/run/netns/pod", IfName: "eth0",
		Args:      "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_UID=u1",
		StdinData: []byte(stdin + "}"),
	}
}

// callsAfter returns the calls after the nth call named name.
func (w *world) callsAfter(name string, nth int) []string {
	seen := 0
	for i, c := range w.calls {
		if strings.HasPrefix(c, name+" ") || c == name {
			seen++
			if seen == nth {
				return append([]string(nil), w.calls[i+1:]...)
			}
		}
	}
	return nil
}

func filterCalls(calls []string, name string) []string {
	var out []string
	for _, c := range calls {
		if strings.HasPrefix(c, name+" ") {
			out = append(out, c)
		}
	}
	return out
}

// added runs a shared-mode ADD and returns the world and the chain's result.
func added(t *testing.T, dir, containerID string) (*world, string) {
	t.Helper()
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}}
	args := cmd(dir, `,"podSelection":"all"`, prevResult100)
	args.ContainerID = containerID
	if err := w.plugin().Add(args); err != nil {
		t.Fatal(err)
	}
	return w, w.stdout.String()
}
