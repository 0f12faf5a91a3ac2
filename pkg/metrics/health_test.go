package metrics

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// healthStats is a shared-mode node whose host ports change between
// scrapes.
type healthStats struct {
	fakeStats
	host    []rdma.PortStats
	hostErr error
}

func (h *healthStats) PortStats(ns string) ([]rdma.PortStats, error) {
	if ns != "" {
		return nil, errors.New("shared mode reads no pod")
	}
	return h.host, h.hostErr
}

var (
	rxeUp = rdma.PortStats{Device: "rxe0", Port: 1, State: "ACTIVE", PhysState: "LinkUp", Rate: 1.25e9,
		GIDs: &rdma.GIDTable{Used: 4, Size: 1024}}
	rxeDown = rdma.PortStats{Device: "rxe0", Port: 1, State: "DOWN", PhysState: "Disabled", Rate: 1.25e9,
		GIDs: &rdma.GIDTable{Used: 2, Size: 1024}}
	mlxUnread = rdma.PortStats{Device: "mlx5_0", Port: 1, State: "ACTIVE", PhysState: "LinkUp",
		Errs: []error{errors.New("rate"), errors.New("GID 7")}}
)

// TestNodeHealth checks, scrape after scrape of one collector, the
// ports' rate, GID table and state, and the devices present or gone: a
// device seen once or named by a record and not seen now is 0; one whose
// netns could not be read is not said; an unreadable figure is left out
// and counted in collect_errors.
func TestNodeHealth(t *testing.T) {
	dir := t.TempDir()
	rec := &state.Record{Network: "rdmanet", ContainerID: "a", IfName: "eth0", NetNS: "/run/netns/a", Mode: "shared",
		Links: []state.Link{{Device: "rxe1", Kind: state.LinkIPVlan, Step: state.StepDone}}}
	if err := state.New(dir).Put(rec); err != nil {
		t.Fatal(err)
	}
	nets := []conflist.Network{{Name: "rdmanet", DataDir: dir}}
	h := &healthStats{fakeStats: fakeStats{mode: rdma.ModeShared}}
	c := NewNodeCollector(h, func() []conflist.Network { return nets }, nil, false)
	names := []string{"rdma_chain_rdma_port_rate_bytes_per_second", "rdma_chain_rdma_port_gids_used", "rdma_chain_rdma_port_gids_size",
		"rdma_chain_rdma_device_present", "rdma_chain_rdma_port_info", "rdma_chain_collect_errors"}
	for _, tc := range []struct {
		name    string
		host    []rdma.PortStats
		hostErr error
		want    []string // samples, as the text format has them
	}{
		{name: "both up", host: []rdma.PortStats{rxeUp, mlxUnread}, want: []string{
			`rdma_chain_rdma_port_rate_bytes_per_second{device="rxe0",port="1"} 1.25e+09`,
			`rdma_chain_rdma_port_gids_used{device="rxe0",port="1"} 4`,
			`rdma_chain_rdma_port_gids_size{device="rxe0",port="1"} 1024`,
			`rdma_chain_rdma_device_present{device="mlx5_0"} 1`,
			`rdma_chain_rdma_device_present{device="rxe0"} 1`,
			`rdma_chain_rdma_device_present{device="rxe1"} 0`,
			`rdma_chain_rdma_port_info{device="rxe0",netns="host",phys_state="LinkUp",port="1",state="ACTIVE"} 1`,
			`rdma_chain_rdma_port_info{device="mlx5_0",netns="host",phys_state="LinkUp",port="1",state="ACTIVE"} 1`,
			`rdma_chain_collect_errors{source="rdma"} 2`}},
		{name: "port down, mlx5_0 gone", host: []rdma.PortStats{rxeDown}, want: []string{
			`rdma_chain_rdma_port_rate_bytes_per_second{device="rxe0",port="1"} 1.25e+09`,
			`rdma_chain_rdma_port_gids_used{device="rxe0",port="1"} 2`,
			`rdma_chain_rdma_port_gids_size{device="rxe0",port="1"} 1024`,
			`rdma_chain_rdma_device_present{device="mlx5_0"} 0`,
			`rdma_chain_rdma_device_present{device="rxe0"} 1`,
			`rdma_chain_rdma_device_present{device="rxe1"} 0`,
			`rdma_chain_rdma_port_info{device="rxe0",netns="host",phys_state="Disabled",port="1",state="DOWN"} 1`,
			`rdma_chain_collect_errors{source="rdma"} 0`}},
		{name: "host unreadable", hostErr: errors.New("EIO"), want: []string{
			`rdma_chain_collect_errors{source="rdma"} 1`}},
		{name: "no RDMA at all", hostErr: fmt.Errorf("infiniband: %w", os.ErrNotExist), want: []string{
			`rdma_chain_rdma_device_present{device="mlx5_0"} 0`,
			`rdma_chain_rdma_device_present{device="rxe0"} 0`,
			`rdma_chain_rdma_device_present{device="rxe1"} 0`,
			`rdma_chain_collect_errors{source="rdma"} 0`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.host, h.hostErr = tc.host, tc.hostErr
			got := samples(t, c, names...)
			for _, w := range tc.want {
				if !got[w] {
					t.Errorf("no sample %s", w)
				}
			}
			for s := range got {
				if !strings.HasPrefix(s, "rdma_chain_collect_errors") && !slices.Contains(tc.want, s) {
					t.Errorf("sample %s, not wanted", s)
				}
			}
		})
	}
}

// samples gathers c and returns its samples of names as text lines.
func samples(t *testing.T, c prometheus.Collector, names ...string) map[string]bool {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fams {
		if slices.Contains(names, f.GetName()) {
			if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := map[string]bool{}
	for _, l := range strings.Split(b.String(), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out[l] = true
		}
	}
	return out
}

// TestPodSoftRoCEDeviceNotRemembered checks that a pod's own rxe device,
// seen on the host while its record names it, has no rdma_device_present
// series, then or after its pod's DEL: its going is no device lost.
func TestPodSoftRoCEDeviceNotRemembered(t *testing.T) {
	dir := t.TempDir()
	store := state.New(dir)
	rec := &state.Record{Network: "rdmanet", ContainerID: "a", IfName: "eth0", NetNS: "/run/netns/a", Mode: "shared",
		Links: []state.Link{{Device: "rxe_0123456789ab", Kind: state.LinkMACVlan, SoftRoCE: true, Step: state.StepDone}}}
	if err := store.Put(rec); err != nil {
		t.Fatal(err)
	}
	nets := []conflist.Network{{Name: "rdmanet", DataDir: dir}}
	podDev := rxeUp
	podDev.Device = "rxe_0123456789ab"
	h := &healthStats{fakeStats: fakeStats{mode: rdma.ModeShared}}
	c := NewNodeCollector(h, func() []conflist.Network { return nets }, nil, false)
	for _, tc := range []struct {
		name string
		host []rdma.PortStats
		del  bool
	}{
		{"pod running", []rdma.PortStats{rxeUp, podDev}, false},
		{"pod deleted", []rdma.PortStats{rxeUp}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.del {
				if err := store.Delete(rec.Key()); err != nil {
					t.Fatal(err)
				}
			}
			h.host = tc.host
			got := samples(t, c, "rdma_chain_rdma_device_present")
			if !got[`rdma_chain_rdma_device_present{device="rxe0"} 1`] {
				t.Errorf("rxe0 not present: %v", got)
			}
			for s := range got {
				if strings.Contains(s, "rxe_0123456789ab") {
					t.Errorf("sample %s of the pod's own device", s)
				}
			}
		})
	}
}
