package rdma

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Port is one RDMA device port as sysfs shows it.
type Port struct {
	Port      int    `json:"port"`
	State     string `json:"state"`
	PhysState string `json:"physState,omitempty"`
	GIDs      int    `json:"gids"`
}

// GID is one non-zero GID table row of an RDMA port.
type GID struct {
	Device string `json:"device"`
	Port   int    `json:"port"`
	Index  int    `json:"index"`
	GID    string `json:"gid"`
	Netdev string `json:"netdev,omitempty"`
	Type   string `json:"type,omitempty"`
}

// PortStats is one RDMA port as sysfs shows it in one netns: its state,
// rate, GID table and the counters of ports/N/counters and
// ports/N/hw_counters.
type PortStats struct {
	Device, State, PhysState string
	Port                     int
	Counters, HWCounters     map[string]float64
	// Rate is ports/N/rate in bytes per second; 0 when it could not be
	// read (Errs says why).
	Rate float64
	// GIDs is the GID table's occupancy; nil when it could not be read
	// (Errs says why).
	GIDs *GIDTable
	// Errs are the port's files that could not be read or parsed.
	Errs []error
}

func (s *System) portPath(dev string, port int, parts ...string) string {
	return filepath.Join(append([]string{s.ibPath(), dev, "ports", strconv.Itoa(port)}, parts...)...)
}

// portNumbers lists the numbered entries of dev's ports directory.
func (s *System) portNumbers(dev string) ([]int, error) {
	entries, err := os.ReadDir(filepath.Join(s.ibPath(), dev, "ports"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out, nil
}

// Ports reads ports/N/{state,phys_state,gids} of dev from sysfs.
func (s *System) Ports(dev string) ([]Port, error) {
	nums, err := s.portNumbers(dev)
	if err != nil {
		return nil, err
	}
	var out []Port
	for _, n := range nums {
		rows, _ := s.gidRows(dev, n)
		out = append(out, Port{Port: n, State: sysfsWord(s.portPath(dev, n, "state")),
			PhysState: sysfsWord(s.portPath(dev, n, "phys_state")), GIDs: len(rows)})
	}
	return out, nil
}

// sysfsWord turns "4: ACTIVE" into "ACTIVE"; "" when unreadable.
func sysfsWord(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if _, w, ok := strings.Cut(s, ": "); ok {
		return w
	}
	return s
}

const zeroGID = "0000:0000:0000:0000:0000:0000:0000:0000"

func (s *System) gidRows(dev string, port int) ([]GID, error) {
	entries, err := os.ReadDir(s.portPath(dev, port, "gids"))
	if err != nil {
		return nil, err
	}
	var out []GID
	for _, e := range entries {
		b, err := os.ReadFile(s.portPath(dev, port, "gids", e.Name()))
		g := strings.TrimSpace(string(b))
		if err != nil || g == zeroGID || g == "" {
			continue
		}
		idx, _ := strconv.Atoi(e.Name())
		out = append(out, GID{Device: dev, Port: port, Index: idx, GID: g,
			Netdev: sysfsWord(s.portPath(dev, port, "gid_attrs", "ndevs", e.Name())),
			Type:   sysfsWord(s.portPath(dev, port, "gid_attrs", "types", e.Name()))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// GIDs lists every non-zero GID of every device visible in sysfs.
func (s *System) GIDs() ([]GID, error) {
	devs, err := os.ReadDir(s.ibPath())
	if err != nil {
		return nil, err
	}
	var out []GID
	for _, d := range devs {
		out = append(out, s.deviceGIDs(d.Name())...)
	}
	return out, nil
}

// DeviceGIDs lists the non-zero GIDs of dev's ports: a reader that wants
// one device's reads its table only (each row is three sysfs files).
func (s *System) DeviceGIDs(dev string) ([]GID, error) {
	if dev == "" || dev == "." || dev == ".." || strings.Contains(dev, "/") {
		return nil, fmt.Errorf("RDMA device name %q is not one", dev)
	}
	if _, err := os.Stat(filepath.Join(s.ibPath(), dev)); err != nil {
		return nil, err
	}
	return s.deviceGIDs(dev), nil
}

func (s *System) deviceGIDs(dev string) []GID {
	var out []GID
	nums, _ := s.portNumbers(dev)
	for _, n := range nums {
		rows, _ := s.gidRows(dev, n)
		out = append(out, rows...)
	}
	return out
}

// PortStats reads every port of every RDMA device sysfs shows, with its
// state and counters.
func (s *System) PortStats() ([]PortStats, error) {
	devs, err := os.ReadDir(s.ibPath())
	if err != nil {
		return nil, err
	}
	var out []PortStats
	for _, d := range devs {
		nums, err := s.portNumbers(d.Name())
		if err != nil {
			return out, err
		}
		for _, n := range nums {
			out = append(out, s.portStats(d.Name(), n))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Device < out[j].Device || (out[i].Device == out[j].Device && out[i].Port < out[j].Port)
	})
	return out, nil
}

func (s *System) portStats(dev string, n int) PortStats {
	p := PortStats{Device: dev, Port: n,
		State: sysfsWord(s.portPath(dev, n, "state")), PhysState: sysfsWord(s.portPath(dev, n, "phys_state")),
		Counters: readCounters(s.portPath(dev, n, "counters")), HWCounters: readCounters(s.portPath(dev, n, "hw_counters"))}
	var err error
	if p.Rate, err = s.readRate(dev, n); err != nil {
		p.Errs = append(p.Errs, err)
	}
	if t, err := s.readGIDTable(dev, n); err != nil {
		p.Errs = append(p.Errs, err)
	} else {
		p.GIDs = &t
	}
	return p
}

// readCounters reads a directory of counter files, one unsigned number
// each. lifespan (hw_counters' refresh interval, a setting) and files that
// are not a number are left out.
func readCounters(dir string) map[string]float64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, e := range entries {
		if e.Name() == "lifespan" || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			out[e.Name()] = float64(v)
		}
	}
	return out
}

// GIDsIn lists the GIDs as the netns at nsPath sees them (exclusive mode:
// the devices moved into it).
func GIDsIn(nsPath string) (gids []GID, err error) {
	err = inNetnsSysfs(nsPath, func(sysRoot string) (err error) {
		gids, err = (&System{SysRoot: sysRoot}).GIDs()
		return err
	})
	return gids, err
}

// PortStatsIn reads the ports as the netns at nsPath sees them (exclusive
// mode: the devices moved into it).
func PortStatsIn(nsPath string) (stats []PortStats, err error) {
	err = inNetnsSysfs(nsPath, func(sysRoot string) (err error) {
		stats, err = (&System{SysRoot: sysRoot}).PortStats()
		return err
	})
	return stats, err
}

// GIDsPerAddress is what one IPv6 address on a shared-mode netdev takes of
// its RDMA port's GID table: a RoCE v1 and a RoCE v2 entry (measured,
// docs/configuration.md "Shared mode"). ADD checks for that much room and
// the DRA driver makes it a claim's share of the port.
const GIDsPerAddress = 2

// FreeGIDs counts the free rows of port's GID table of dev (the kernel
// shows a free row as the zero GID), and returns the table's size. It
// reads from the highest index down, as the kernel fills the table from
// the lowest free index, and stops at the want-th free row: a check for
// room reads a few rows of a table with room, and every row only of a full
// one. A row that cannot be read is an error: it is neither free nor known
// to be used.
func (s *System) FreeGIDs(dev string, port, want int) (free, size int, err error) {
	entries, err := os.ReadDir(s.portPath(dev, port, "gids"))
	if err != nil {
		return 0, 0, fmt.Errorf("GID table of %s port %d: %w", dev, port, err)
	}
	rows := make([]int, 0, len(entries))
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			rows = append(rows, n)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(rows)))
	for _, n := range rows {
		if free >= want {
			break
		}
		b, err := os.ReadFile(s.portPath(dev, port, "gids", strconv.Itoa(n)))
		if err != nil {
			return free, len(rows), fmt.Errorf("GID %d of %s port %d: %w", n, dev, port, err)
		}
		if strings.TrimSpace(string(b)) == zeroGID {
			free++
		}
	}
	return free, len(rows), nil
}
