package chain

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// TestStrandedHoldersNeverStallTheNode checks that two exclusive-mode
// holders whose netns paths are gone while a process keeps each netns
// alive (the kernel never gives their devices back) do not stall the
// node: of three ADDs at once, one waits for one of them once, the
// others never, and all three get the free devices well inside the
// lock's timeout. A later ADD waits for neither, and each stranded
// holder is reported once.
func TestStrandedHoldersNeverStallTheNode(t *testing.T) {
	const wait = 1500 * time.Millisecond // each stuck device's wait
	dev := func(i int) rdma.Device {
		return rdma.Device{Name: fmt.Sprintf("mlx5_%d", i), Driver: "mlx5_core", Netdev: fmt.Sprintf("eth%d", i+1)}
	}
	dir := t.TempDir()
	w := &world{mode: rdma.ModeExclusive, devices: []rdma.Device{dev(0), dev(1)}}
	conf := `,"podSelection":"all"`
	p := New(Env{RDMA: w, Links: w, IPAM: w, Addrs: w, SMC: (*fakeSMC)(w), PodResources: w,
		Netns: (*fakeNetns)(w), Stdout: &w.stdout, Stderr: &w.stderr, LockTimeout: 5 * time.Second})
	for _, holder := range []string{"a", "b"} {
		args := cmd(dir, conf, prevResult100)
		args.ContainerID, args.Netns = "pod"+holder, "/var/run/netns/"+holder
		if err := p.Add(args); err != nil {
			t.Fatal(err)
		}
	}
	// Both holders' netns paths go; their netns live on, with their devices.
	w.mu.Lock()
	w.gone = map[string]bool{"/var/run/netns/a": true, "/var/run/netns/b": true}
	w.stuck = map[string]bool{"mlx5_0": true, "mlx5_1": true}
	w.returnWait = wait
	w.devices = []rdma.Device{dev(2), dev(3), dev(4), dev(5)}
	w.mu.Unlock()

	add := func(id string) (time.Duration, error) {
		args := cmd(dir, conf, prevResult100)
		args.ContainerID, args.Netns = id, "/var/run/netns/"+id
		start := time.Now()
		err := p.Add(args)
		return time.Since(start), err
	}
	var wg sync.WaitGroup
	took := make([]time.Duration, 3)
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { took[i], errs[i] = add(fmt.Sprintf("new%d", i)) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("ADD %d of 3 at once: %v", i, err)
		}
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("three ADDs at once beside two stranded holders (a stuck device waits %v): %v", wait, took)
	if n := len(filterCalls(w.calls, "ReturnToHost")); n != 1 {
		t.Errorf("ReturnToHost %d times, want once (one wait for one stranded holder): %v", n, filterCalls(w.calls, "ReturnToHost"))
	}

	w.calls = nil
	if _, err := add("later"); err != nil {
		t.Fatal(err)
	}
	if n := len(filterCalls(w.calls, "ReturnToHost")); n != 0 {
		t.Errorf("a later ADD waited for a stranded holder again: %v", w.calls)
	}
	if n := strings.Count(w.stderr.String(), "has not given its RDMA device back"); n != 2 {
		t.Errorf("stranded holders reported %d times, want once each:\n%s", n, w.stderr.String())
	}
	recs, err := state.New(dir).List()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if strings.HasPrefix(r.ContainerID, "pod") && r.StrandedAt.IsZero() {
			t.Errorf("holder %s not marked stranded", r.ContainerID)
		}
	}

	// Once the kernel gives a device back, the next ADD reclaims it
	// without waiting.
	w.mu.Lock()
	w.stuck, w.devices = nil, append(w.devices, dev(0))
	w.mu.Unlock()
	w.calls = nil
	if _, err := add("after"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(w.calls, "ReturnToHost mlx5_0 /var/run/netns/a") {
		t.Errorf("the device back on the host was not reclaimed: %v", w.calls)
	}
}

// TestExclusiveStrandedHolderReclaimed checks that a pod whose netns died
// without a DEL does not hold its exclusive device forever: the next
// pod's ADD gives it back as DEL would and gets it.
func TestExclusiveStrandedHolderReclaimed(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeExclusive, devices: []rdma.Device{{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "eth1"}}}
	conf := `,"podSelection":"all","ipam":{"type":"host-local"}`
	a := cmd(dir, conf, prevResult100)
	a.ContainerID, a.Netns = "podA", "/var/run/netns/a"
	if err := w.plugin().Add(a); err != nil {
		t.Fatal(err)
	}
	b := cmd(dir, conf, prevResult100)
	b.ContainerID, b.Netns = "podB", "/var/run/netns/b"
	wantCode(t, w.plugin().Add(b), types.ErrTryAgainLater, "mlx5_0")

	w.gone = map[string]bool{"/var/run/netns/a": true}
	w.calls = nil
	if err := w.plugin().Add(b); err != nil {
		t.Fatalf("ADD after the holder's netns died: %v", err)
	}
	for _, want := range []string{"ReturnToHost mlx5_0 /var/run/netns/a", "RestoreToHost eth1 /var/run/netns/a",
		"IPAMDel podA rdma0", "MoveToNetns mlx5_0"} {
		if !slices.Contains(w.calls, want) {
			t.Errorf("calls lack %q: %v", want, w.calls)
		}
	}
	if files := stateFiles(t, dir); len(files) != 1 || !strings.Contains(files[0], "podB") {
		t.Errorf("records %v, want only podB's", files)
	}
	if !strings.Contains(w.stderr.String(), "reclaimed RDMA devices") {
		t.Errorf("reclaim not logged: %s", w.stderr.String())
	}
	noKeyLocks(t, dir)
}

// TestStrandedNeedsDeadNetns checks that a holder whose netns path now
// names another netns (the path was reused) is stranded too; an alive one
// is never touched.
func TestStrandedNeedsDeadNetns(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeExclusive, devices: []rdma.Device{{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "eth1"}}}
	a := cmd(dir, `,"podSelection":"all"`, prevResult100)
	a.ContainerID = "podA"
	if err := w.plugin().Add(a); err != nil {
		t.Fatal(err)
	}
	st := state.New(dir)
	rec, err := st.Get(state.Key{Network: "rdmanet", ContainerID: "podA", IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	b := cmd(dir, `,"podSelection":"all"`, prevResult100)
	b.ContainerID, b.Netns = "podB", "/var/run/netns/b"
	wantCode(t, w.plugin().Add(b), types.ErrTryAgainLater, "podA")
	// The kernel reused the inode number for a new netns at the same
	// path: only the cookie tells.
	w.cookieBump = map[string]uint64{"/var/run/netns/pod": 1}
	if err := w.plugin().Add(b); err != nil {
		t.Fatalf("ADD after the holder's netns path was reused: %v", err)
	}
	_ = rec
}

// TestReclaimRelistsDevices checks that after a reclaim the devices are
// listed again: the kernel gave the holder's netdev back under its pod
// name, and the reclaim renamed it.
func TestReclaimRelistsDevices(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeExclusive, devices: []rdma.Device{{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "eth1"}}}
	a := cmd(dir, `,"podSelection":"all"`, prevResult100)
	a.ContainerID, a.Netns = "podA", "/var/run/netns/a"
	if err := w.plugin().Add(a); err != nil {
		t.Fatal(err)
	}
	w.gone = map[string]bool{"/var/run/netns/a": true}
	w.devices = []rdma.Device{{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "rdma0"}} // as the kernel returned it
	w.onRestore = func() { w.devices = []rdma.Device{{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "eth1"}} }
	b := cmd(dir, `,"podSelection":"all"`, prevResult100)
	b.ContainerID, b.Netns = "podB", "/var/run/netns/b"
	w.calls = nil
	if err := w.plugin().Add(b); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(w.calls, "Describe eth1 rdma0") {
		t.Errorf("pod B's netdev not the restored eth1: %v", w.calls)
	}
}
