//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// What a fleet run is, unless the environment says otherwise.
const (
	// fleetClaims is how many claims each DeviceClass's scheduler phase
	// asks for (FLEET_CLAIMS).
	fleetClaims = 2000
	// fleetIdle is the window the idle requests are counted over
	// (FLEET_IDLE): the reflectors' watches are renewed every 5 to 10
	// minutes, a shorter window would miss nothing else.
	fleetIdle = 2 * time.Minute
	// fleetSettle is how long the fleet runs after its last slice before
	// its memory is read and its idle window starts: longer than the
	// ResourceSlice controller's sync delay (30 s), which checks each
	// pool once more after its informer saw the slice.
	fleetSettle = 45 * time.Second
	// fleetNICs is each simulated node's RDMA NICs.
	fleetNICs = 8
	// fleetGIDs is each NIC's GID table (mlx5's 256 on RoCE): 128 claims
	// of 2 entries per NIC in shared mode.
	fleetGIDs = 256
)

// TestFleet runs the driver's publishing and claim status code for N
// simulated nodes, for each N of FLEET_NODES (make test-fleet), against a
// control plane of the tier's (no node VMs), and prints one table of
// FLEET-FIGURE lines: the time until every node's ResourceSlice is in the
// API, the drivers' API requests per node and minute while idle (watches,
// reads, writes: the goal is no write and no read, only the watches),
// their heap per node, and the scheduler's claims per second with the
// install's DeviceClass (its CEL selector) and with a plain one. A size
// that cannot finish fails with why; a write or a read while idle fails
// the size too, its figures printed all the same. It needs the tier's
// parts, not root; make test-cluster leaves it out (-skip TestFleet).
func TestFleet(t *testing.T) {
	sizes := fleetSizes(t)
	cfg := fleetConfig{claims: envInt(t, "FLEET_CLAIMS", fleetClaims), idle: envDuration(t, "FLEET_IDLE", fleetIdle), settle: fleetSettle}
	parts := readParts(t)
	t.Logf("FLEET-FIGURE machine: %s, %d CPUs (runtime.NumCPU), Kubernetes %s", cpuModel(), runtime.NumCPU(), parts["KUBE_VERSION"])
	var mu sync.Mutex
	var rows []fleetRow
	for _, n := range sizes {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			waitNoVMs(t)
			ctx, stop := context.WithCancel(context.Background())
			vms := watchVMs(ctx)
			row := &fleetRow{nodes: n, devices: n * fleetNICs}
			// A size that stops short is printed with what it measured.
			defer func() {
				stop()
				if seen := vms(); seen != "" {
					t.Errorf("a VM ran beside the fleet (%s): its figures are not this machine's alone", seen)
					row.note = "a VM ran beside it"
				}
				if t.Failed() && row.note == "" {
					row.note = "failed"
				}
				mu.Lock()
				defer mu.Unlock()
				rows = append(rows, *row)
				logFleetTable(t, rows)
			}()
			runFleet(t, parts, cfg, row)
		})
	}
}

// fleetConfig is what each size runs.
type fleetConfig struct {
	claims       int
	idle, settle time.Duration
}

// fleetSizes reads FLEET_NODES: node counts, comma-separated. Without it
// the test cannot know what to run: make test-fleet sets it.
func fleetSizes(t *testing.T) []int {
	t.Helper()
	v := os.Getenv("FLEET_NODES")
	if v == "" {
		testenv.Unavailable(t, "FLEET_NODES unset (make test-fleet sets it, e.g. FLEET_NODES=100,300,1000)")
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("FLEET_NODES=%s: %q is not a node count", v, f)
		}
		out = append(out, n)
	}
	return out
}

func envInt(t *testing.T, key string, def int) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%s: not a positive count", key, v)
	}
	return n
}

func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%s: not a duration", key, v)
	}
	return d
}

// waitNoVMs waits until no qemu runs on the host: a VM tier beside the
// fleet would take the CPUs its figures are about.
func waitNoVMs(t *testing.T) {
	t.Helper()
	for logged := false; ; logged = true {
		pids := qemuPIDs()
		if len(pids) == 0 {
			return
		}
		if !logged {
			t.Logf("waiting for qemu (pids %s) to end: the figures would be the VMs'", strings.Join(pids, ","))
		}
		if wait, _ := testenv.Within(t, time.Hour); wait < time.Minute {
			t.Fatalf("qemu still runs (pids %s): no time left to run the fleet beside nothing", strings.Join(pids, ","))
		}
		time.Sleep(30 * time.Second)
	}
}

// watchVMs samples the host's qemu processes every 10 s until ctx ends
// and returns what it saw first: "" while none ran.
func watchVMs(ctx context.Context) func() string {
	var mu sync.Mutex
	seen := ""
	go func() {
		for ctx.Err() == nil {
			if pids := qemuPIDs(); len(pids) > 0 {
				mu.Lock()
				if seen == "" {
					seen = fmt.Sprintf("qemu pids %s at %s", strings.Join(pids, ","), time.Now().UTC().Format(time.TimeOnly))
				}
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// qemuPIDs are the host's qemu-system processes.
func qemuPIDs() []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.HasPrefix(string(b), "qemu-system") {
			out = append(out, e.Name())
		}
	}
	return out
}

// cpuModel is /proc/cpuinfo's first model name.
func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// fleetRow is one size's figures.
type fleetRow struct {
	nodes, devices int
	published      time.Duration // from the drivers' start to the last node's slice in the API
	// Per node and minute while idle, the drivers' requests by kind, and
	// the simulated kubelets' (Lease renewals).
	idleWatch, idleRead, idleWrite, kubeletWrite float64
	heapPerNode                                  float64 // bytes
	goroutinesPerNode                            float64
	claims                                       int
	classes                                      []classFigures
	note                                         string
}

// classFigures is the scheduler phase of one DeviceClass.
type classFigures struct {
	class            string
	perSecond        float64 // claims allocated per second, from the first pod ungated to the last allocation
	schedCPUPerClaim float64 // kube-scheduler's CPU milliseconds per claim over that time
}

// logFleetTable prints rows as a Markdown table, each line starting
// FLEET-FIGURE.
func logFleetTable(t *testing.T, rows []fleetRow) {
	t.Helper()
	lines := []string{
		"| nodes | devices | every slice published | driver requests /node/min idle: watch, read, write | simulated kubelet writes /node/min | driver heap /node | goroutines /node | claims | claims/s, shipped class (CEL) | claims/s, plain class | scheduler CPU /claim, shipped | scheduler CPU /claim, plain | note |",
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|",
	}
	for _, r := range rows {
		cells := []string{strconv.Itoa(r.nodes), strconv.Itoa(r.devices), fmt.Sprintf("%.1f s", r.published.Seconds()),
			fmt.Sprintf("%.3f, %.3f, %.3f", r.idleWatch, r.idleRead, r.idleWrite), fmt.Sprintf("%.1f", r.kubeletWrite),
			fmt.Sprintf("%.0f KiB", r.heapPerNode/1024), fmt.Sprintf("%.1f", r.goroutinesPerNode), strconv.Itoa(r.claims)}
		var rates, cpu []string
		for _, c := range r.classes {
			rates = append(rates, fmt.Sprintf("%.1f", c.perSecond))
			cpu = append(cpu, fmt.Sprintf("%.1f ms", c.schedCPUPerClaim))
		}
		for len(rates) < 2 {
			rates, cpu = append(rates, "-"), append(cpu, "-")
		}
		cells = append(cells, rates...)
		cells = append(cells, cpu...)
		cells = append(cells, r.note)
		lines = append(lines, "| "+strings.Join(cells, " | ")+" |")
	}
	for _, l := range lines {
		t.Logf("FLEET-FIGURE %s", l)
	}
}
