package rdma

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// GIDTable is the occupancy of one port's GID table: its rows
// (ports/N/gids/0..Size-1) and those holding a GID other than the zero
// GID, which the kernel shows for a free row.
type GIDTable struct{ Used, Size int }

// gidRow is a GID as sysfs prints it (%pI6): eight groups of four
// lowercase hex digits.
var gidRow = regexp.MustCompile(`^[0-9a-f]{4}(:[0-9a-f]{4}){7}$`)

// readGIDTable reads every row of port's GID table of dev. The table is
// parsed strictly: its entries are the rows 0..n-1 and nothing else, and
// each row is one GID in the kernel's format; anything else (a row that
// cannot be read, a stray entry, a malformed row) is an error, and no
// figure is given: a row neither free nor used cannot be counted.
func (s *System) readGIDTable(dev string, port int) (GIDTable, error) {
	dir := s.portPath(dev, port, "gids")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return GIDTable{}, fmt.Errorf("GID table of %s port %d: %w", dev, port, err)
	}
	seen := make([]bool, len(entries))
	t := GIDTable{Size: len(entries)}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < 0 || n >= len(entries) || seen[n] || strconv.Itoa(n) != e.Name() {
			return GIDTable{}, fmt.Errorf("GID table of %s port %d: entry %q is not one of rows 0-%d", dev, port, e.Name(), len(entries)-1)
		}
		seen[n] = true
		b, err := os.ReadFile(s.portPath(dev, port, "gids", e.Name()))
		if err != nil {
			return GIDTable{}, fmt.Errorf("GID %d of %s port %d: %w", n, dev, port, err)
		}
		g, ok := strings.CutSuffix(string(b), "\n")
		if !ok || !gidRow.MatchString(g) {
			return GIDTable{}, fmt.Errorf("GID %d of %s port %d: %q is not a GID", n, dev, port, b)
		}
		if g != zeroGID {
			t.Used++
		}
	}
	return t, nil
}

// portRate is ports/N/rate as the kernel prints it: Gb/s (with ".5"
// when not whole), the width and the speed's name.
var portRate = regexp.MustCompile(`^([0-9]{1,7})(\.5)? Gb/sec \(([0-9]{1,2})X( [A-Z0-9]{1,8})?\)$`)

// readRate reads port's ports/N/rate of dev in bytes per second.
func (s *System) readRate(dev string, port int) (float64, error) {
	b, err := os.ReadFile(s.portPath(dev, port, "rate"))
	if err != nil {
		return 0, fmt.Errorf("rate of %s port %d: %w", dev, port, err)
	}
	return parseRate(string(b))
}

// parseRate turns "100 Gb/sec (4X EDR)\n" into bytes per second.
func parseRate(s string) (float64, error) {
	line, ok := strings.CutSuffix(s, "\n")
	m := portRate.FindStringSubmatch(line)
	if !ok || m == nil {
		return 0, fmt.Errorf("rate %q is not the kernel's N Gb/sec (WX SPEED)", s)
	}
	gb, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("rate %q: %w", s, err)
	}
	if m[2] != "" {
		gb += 0.5
	}
	return gb * 1e9 / 8, nil
}
