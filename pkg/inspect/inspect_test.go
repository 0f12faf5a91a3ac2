package inspect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// fakeReader is a node with soft-RoCE, SMC and two pod netns.
type fakeReader struct {
	mode    rdma.Mode
	modeErr error
	smcErr  error
	pnet    map[string][]smc.PnetEntry
	ifaces  map[string][]Iface
	gone    map[string]bool
	gids    []rdma.GID
	hooked  []uint32 // netns inodes in the SMC socket hook; nil: not attached
	offer   smc.Offer
	// noSoftRoCE is why the kernel cannot serve podSoftRoCE ("": it can).
	noSoftRoCE string
}

func newFakeReader() *fakeReader {
	return &fakeReader{
		mode: rdma.ModeShared,
		pnet: map[string][]smc.PnetEntry{
			"":             {{PnetID: "RXE0", IBName: "rxe0", IBPort: 1}},
			"/run/netns/a": {{PnetID: "RXE0", EthName: "eth0"}},
		},
		ifaces: map[string][]Iface{
			"/run/netns/a": {{Name: "lo", Kind: "device", Up: true, Addrs: []string{"127.0.0.1/8"}},
				{Name: "eth0", Kind: "veth", Up: true, MAC: "0a:00:00:00:00:01", Addrs: []string{"10.1.0.5/24"}},
				{Name: "rdma0", Kind: "ipvlan", Up: true, MAC: "52:54:00:12:34:56", Addrs: []string{"fd00:77::10/64", "fe80::5054:ff:fe12:3456/64"}}},
			"/run/netns/c": {{Name: "eth0", Kind: "veth", Up: true}},
		},
		gone: map[string]bool{"/run/netns/b": true},
		gids: []rdma.GID{
			{Device: "rxe0", Port: 1, Index: 0, GID: "fe80:0000:0000:0000:5054:00ff:fe12:3456", Netdev: "eth1", Type: "IB/RoCE v1"},
			{Device: "rxe0", Port: 1, Index: 4, GID: "fd00:0077:0000:0000:0000:0000:0000:0010", Netdev: "rdma0", Type: "RoCE v2"},
			{Device: "rxe0", Port: 1, Index: 5, GID: "fd00:0077:0000:0000:0000:0000:0000:0011", Netdev: "rdma0", Type: "RoCE v2"},
		},
	}
}

func (f *fakeReader) NetnsMode() (rdma.Mode, error) {
	if f.modeErr != nil {
		return "", f.modeErr
	}
	return f.mode, nil
}
func (f *fakeReader) Devices() ([]rdma.Device, error) {
	return []rdma.Device{{Name: "rxe0", Driver: "rdma_rxe", Netdev: "eth1", NodeGUID: "5054:00ff:fe12:3456"}}, nil
}
func (f *fakeReader) Ports(string) ([]rdma.Port, error) {
	return []rdma.Port{{Port: 1, State: "ACTIVE", PhysState: "LINK_UP", GIDs: 3}}, nil
}
func (f *fakeReader) GIDs() ([]rdma.GID, error) {
	if f.mode == rdma.ModeExclusive {
		return nil, nil // a moved device is not visible from the host
	}
	return f.gids, nil
}
func (f *fakeReader) GIDsIn(string) ([]rdma.GID, error)       { return f.gids, nil }
func (f *fakeReader) InNetns(string, string) (bool, error)    { return true, nil }
func (f *fakeReader) NetnsGone(r *state.Record) (bool, error) { return f.gone[r.NetNS], nil }
func (f *fakeReader) Pnet(p string) ([]smc.PnetEntry, error) {
	if f.smcErr != nil {
		return nil, f.smcErr
	}
	return f.pnet[p], nil
}
func (f *fakeReader) UEIDs() ([]string, error) { return []string{"RDMACHAIN"}, nil }

func (f *fakeReader) SocketHook() (hookmap.Status, error) {
	return hookmap.Status{Attached: f.hooked != nil, Held: f.hooked != nil, Listed: f.hooked}, nil
}
func (f *fakeReader) SMCOffer() smc.Offer         { return f.offer }
func (f *fakeReader) SoftRoCEUnsupported() string { return f.noSoftRoCE }
func (f *fakeReader) Fallbacks(string) (smc.FallbackReport, error) {
	return smc.FallbackReport{ClientTotal: 2, Reasons: []smc.FallbackStat{{Reason: 0x03030000, Count: 2}}}, nil
}
func (f *fakeReader) Interfaces(p string) ([]Iface, error) {
	if f.gone[p] {
		return nil, errors.New("no such file or directory")
	}
	return f.ifaces[p], nil
}
func (f *fakeReader) SMCSysctls(string) (map[string]string, error) {
	return map[string]string{"autocorking_size": "65536"}, nil
}

func writeState(t *testing.T) string {
	dir := t.TempDir()
	st := state.New(dir)
	t0 := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	recs := []*state.Record{
		{Network: "rdmanet", ContainerID: "aaaa", IfName: "eth0", NetNS: "/run/netns/a", Mode: "shared", CreatedAt: t0,
			Pod: state.Pod{Namespace: "default", Name: "smc-pod", UID: "uid-a"},
			Links: []state.Link{{Device: "rxe0", Kind: state.LinkIPVlan, Step: state.StepDone, IPs: []string{"fd00:77::10/64"},
				HostLink: state.HostLink{HostName: "eth1", PodName: "rdma0", MAC: "52:54:00:12:34:56"}}},
			SMC: &state.SMC{PnetID: "RXE0", Device: "rxe0", IBPort: 1, PodIfName: "eth0", HostEntry: true, PodEntry: true}},
		{Network: "rdmanet", ContainerID: "bbbb", IfName: "eth0", NetNS: "/run/netns/b", Mode: "shared", CreatedAt: t0,
			Pod: state.Pod{Namespace: "default", Name: "gone-pod", UID: "uid-b"}},
		{Network: "rdmanet", ContainerID: "cccc", IfName: "eth0", NetNS: "/run/netns/c", Mode: "shared", CreatedAt: t0,
			Pod: state.Pod{Namespace: "default", Name: "broken-pod", UID: "uid-c"},
			Links: []state.Link{{Device: "rxe0", Kind: state.LinkIPVlan, Step: state.StepDone, IPs: []string{"fd00:77::12/64"},
				HostLink: state.HostLink{HostName: "eth1", PodName: "rdma0", MAC: "52:54:00:12:34:56"}}},
			SMC: &state.SMC{PnetID: "RXE0", Device: "rxe0", IBPort: 1, PodIfName: "eth0", PodEntry: true}},
	}
	for _, r := range recs {
		if err := st.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	for i, e := range []outcome.Entry{
		{Verb: "ADD", Pod: "default/failed-pod", ContainerID: "dddd", IfName: "eth0", Code: 103, Msg: "no offered RDMA device matches the pod's request"},
		{Verb: "ADD", Pod: "default/smc-pod", ContainerID: "aaaa", IfName: "eth0"},
		{Verb: "ADD", Pod: "default/retried", ContainerID: "eeee", IfName: "eth0", Code: 11, Msg: "try again"},
		{Verb: "ADD", Pod: "default/retried", ContainerID: "ffff", IfName: "eth0"},
	} {
		e.Time = t0.Add(time.Duration(i) * time.Minute)
		if err := outcome.Record(dir, e); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestInspectReport(t *testing.T) {
	dir := writeState(t)
	k := newFakeReader()
	k.hooked = []uint32{4026532301}
	k.offer = smc.Offer{SMC: true, IPPROTOSMC: true, SocketHook: true}
	in := &inspector{k: k, dataDirs: []string{dir}}
	r := in.inspect("/run/netns/a")
	var text bytes.Buffer
	WriteText(&text, r)
	got := text.String()
	for _, want := range []string{
		"RDMA netns mode: shared\n",
		"  rxe0  driver rdma_rxe  netdev eth1  netns host  port 1 ACTIVE (LINK_UP) 3 GIDs\n",
		"SMC: available; UEIDs: RDMACHAIN\n",
		"  transparent SMC (smcr.transparent auto): socket_hook; kernel offers smc,ipproto_smc,socket_hook\n",
		"    RXE0 ib rxe0 port 1\n",
		"  socket hook (smcr.transparent bpf): attached, held by the reconcile daemon, 1 netns listed [4026532301]\n",
		"  rdmanet/aaaa/eth0  pod default/smc-pod  shared  netns /run/netns/a  since 2026-11-23T09:00:00Z\n" +
			"    link rxe0 ipvlan as rdma0 (host eth1) ips fd00:77::10/64 step done\n" +
			"    SMC-R pnetid RXE0: rxe0 port 1, pod eth0\n    healthy\n",
		"    PROBLEM: netns /run/netns/b is gone (stale: reconcile or the runtime's DEL/GC releases it)\n",
		"    PROBLEM: interface rdma0 is missing from the pod netns\n    PROBLEM: pod pnet entry RXE0 eth eth0 is missing\n",
		"  default/failed-pod  ADD  code 103  at 2026-11-23T09:00:00Z  dddd/eth0: no offered RDMA device matches the pod's request\n",
		"  default/retried  ADD  code 11  at 2026-11-23T09:02:00Z  eeee/eth0: try again\n    since then: ADD ok at 2026-11-23T09:03:00Z\n",
		"Netns /run/netns/a:\n",
		"  rdma0 ipvlan up 52:54:00:12:34:56  [RDMA]\n    inet fd00:77::10/64\n    inet fe80::5054:ff:fe12:3456/64\n" +
			"    GID rxe0 port 1 index 4 fd00:0077:0000:0000:0000:0000:0000:0010 RoCE v2\n",
		"    RXE0 eth eth0\n", "    autocorking_size = 65536\n",
		"  SMC fallbacks to TCP: server 0, client 2\n    client reason 0x03030000 x2\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("text lacks:\n%s\n--- text:\n%s", want, got)
		}
	}
	if strings.Contains(got, "index 5") || strings.Contains(got, "Could not read") {
		t.Errorf("another pod's GID or an unreadable part shown:\n%s", got)
	}
	if len(r.Attachments) != 3 || !r.Attachments[0].Healthy || r.Attachments[1].Healthy || r.Attachments[2].Healthy {
		t.Errorf("health: %+v", r.Attachments)
	}
	b, err := json.Marshal(r)
	if err != nil || !bytes.Contains(b, []byte(`"lastFailures":[{"time":"2026-11-23T09:00:00Z","verb":"ADD"`)) ||
		!bytes.Contains(b, []byte(`"transparent":"socket_hook","offer":{"smc":true,"tcp2smc":false,"ipprotoSMC":true,"socketHook":true,"hsCtrl":false}`)) {
		t.Errorf("json: %v %s", err, b)
	}
}

// TestInspectExclusiveGIDs checks that in exclusive mode the pod's GIDs
// come from the pod netns's own view.
func TestInspectExclusiveGIDs(t *testing.T) {
	f := newFakeReader()
	f.mode = rdma.ModeExclusive
	in := &inspector{k: f, dataDirs: []string{t.TempDir()}}
	r := in.inspect("/run/netns/a")
	if r.Netns == nil || len(r.Netns.Interfaces) < 2 || len(r.Netns.Interfaces[1].GIDs) != 1 || r.Netns.Interfaces[1].GIDs[0].Index != 4 {
		t.Fatalf("netns %+v", r.Netns)
	}
}

func TestInspectSaysWhatItCouldNotRead(t *testing.T) {
	f := newFakeReader()
	f.modeErr = fmt.Errorf("read RDMA netns mode: %w", rdma.ErrNoRDMA)
	f.smcErr = fmt.Errorf("generic netlink family SMC_PNETID not found: %w", smc.ErrUnavailable)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, outcome.FileName), []byte("junk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := &inspector{k: f, dataDirs: []string{dir}}
	r := in.inspect("")
	var text bytes.Buffer
	WriteText(&text, r)
	for _, want := range []string{
		"RDMA netns mode: unknown",
		"SMC: not available (generic netlink family SMC_PNETID not found: SMC is not available on this kernel)\n" +
			"  transparent SMC (smcr.transparent auto): no_smc; kernel offers no_smc\n",
		"Could not read (2):\n  RDMA netns mode: read RDMA netns mode: kernel has no RDMA subsystem\n",
		"  outcome log in " + dir + ": read outcomes",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}

func TestGIDIP(t *testing.T) {
	for g, want := range map[string]string{
		"0000:0000:0000:0000:0000:ffff:0a01:0005": "10.1.0.5",
		"fd00:0077:0000:0000:0000:0000:0000:0010": "fd00:77::10",
		"fe80::": "<nil>",
	} {
		if ip := gidIP(g); ip.String() != want {
			t.Errorf("gidIP(%s) = %v, want %s", g, ip, want)
		}
	}
}

// TestOperationsDocs checks that docs/operations.md describes every field
// of inspect --json, with the schema version.
func TestOperationsDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	for _, f := range jsonFields(reflect.TypeOf(Report{})) {
		// `f`, `a.f`, `f[]` or `a.f[]`
		if !regexp.MustCompile("[`.]" + f + "(\\[\\])?`").MatchString(text) {
			t.Errorf("docs/operations.md does not describe inspect --json field %s", f)
		}
	}
	if !strings.Contains(text, fmt.Sprintf(`"schemaVersion": %d`, ReportSchemaVersion)) {
		t.Errorf("docs/operations.md does not give schema version %d", ReportSchemaVersion)
	}
}

// jsonFields lists the JSON names of t's fields, nested ones as a.b.
func jsonFields(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeOf(time.Time{}) {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		out = append(out, name)
		for _, sub := range jsonFields(f.Type) {
			if !slices.Contains(out, sub) {
				out = append(out, sub)
			}
		}
	}
	return out
}

// TestInspectPodSoftRoCEKernel checks that inspect says whether the
// kernel serves podSoftRoCE, and why not.
func TestInspectPodSoftRoCEKernel(t *testing.T) {
	for _, why := range []string{"", "kernel 6.12.41: rdma_rxe works inside a netns only from Linux 7.1"} {
		t.Run(fmt.Sprintf("refused=%v", why != ""), func(t *testing.T) {
			k := newFakeReader()
			k.noSoftRoCE = why
			r := (&inspector{k: k, dataDirs: []string{t.TempDir()}}).inspect("")
			if r.RDMA.PodSoftRoCE != (why == "") || r.RDMA.PodSoftRoCEReason != why {
				t.Errorf("report %+v, want served %v reason %q", r.RDMA, why == "", why)
			}
			var text bytes.Buffer
			WriteText(&text, r)
			want := "Soft-RoCE per pod (podSoftRoCE): served by this kernel\n"
			if why != "" {
				want = "Soft-RoCE per pod (podSoftRoCE): refused: " + why + "\n"
			}
			if !strings.Contains(text.String(), want) {
				t.Errorf("text lacks %q:\n%s", want, text.String())
			}
		})
	}
}

// TestInspectSoftRoCE checks that a pod's own rxe device (podSoftRoCE)
// is shown as such, and one the kernel no longer lists is a problem of
// its attachment.
func TestInspectSoftRoCE(t *testing.T) {
	cases := []struct {
		device  string
		healthy bool
	}{
		{"rxe0", true},              // listed by the fake kernel
		{"rxe_0123456789ab", false}, // not listed: gone
	}
	for _, tc := range cases {
		t.Run(tc.device, func(t *testing.T) {
			dir := t.TempDir()
			rec := &state.Record{Network: "rdmanet", ContainerID: "aaaa", IfName: "eth0", NetNS: "/run/netns/a", Mode: "shared",
				Links: []state.Link{{Device: tc.device, Kind: state.LinkMACVlan, Step: state.StepDone, SoftRoCE: true,
					HostLink: state.HostLink{HostName: "eth1", PodName: "rdma0", MAC: "52:54:00:12:34:56"}}}}
			if err := state.New(dir).Put(rec); err != nil {
				t.Fatal(err)
			}
			in := &inspector{k: newFakeReader(), dataDirs: []string{dir}}
			r := in.inspect("")
			var text bytes.Buffer
			WriteText(&text, r)
			if !strings.Contains(text.String(), "link "+tc.device+" macvlan (the pod's own rxe device) as rdma0") {
				t.Errorf("text lacks the pod's rxe device:\n%s", text.String())
			}
			a := r.Attachments[0]
			gone := slices.Contains(a.Problems, "rxe device "+tc.device+" of the pod is gone")
			if a.Healthy != tc.healthy || gone == tc.healthy || !a.Links[0].SoftRoCE {
				t.Errorf("attachment %+v: want healthy %v", a, tc.healthy)
			}
		})
	}
}
