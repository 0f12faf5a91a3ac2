package rdma

import (
	"strconv"
	"strings"
	"testing"
)

// TestReadGIDTable checks that the table's size is its rows, used those
// other than the zero GID; a stray entry, a gap, an unreadable or
// malformed row gives no figure but an error.
func TestReadGIDTable(t *testing.T) {
	used := "fe80:0000:0000:0000:5054:00ff:fe12:3456"
	v4 := "0000:0000:0000:0000:0000:ffff:0a01:0005"
	tests := []struct {
		name  string
		rows  map[string]string // "": a directory where the row should be (unreadable)
		want  GIDTable
		error string
	}{
		{"rxe after boot", map[string]string{"0": used, "1": used, "2": zeroGID, "3": zeroGID}, GIDTable{Used: 2, Size: 4}, ""},
		{"full", map[string]string{"0": used, "1": v4}, GIDTable{Used: 2, Size: 2}, ""},
		{"empty", map[string]string{"0": zeroGID}, GIDTable{Size: 1}, ""},
		{"no rows", map[string]string{}, GIDTable{}, ""},
		{"gap", map[string]string{"0": used, "2": used}, GIDTable{}, `entry "2" is not one of rows 0-1`},
		{"stray entry", map[string]string{"0": used, "x": used}, GIDTable{}, `entry "x"`},
		{"leading zero", map[string]string{"0": used, "01": used}, GIDTable{}, `entry "01"`},
		{"unreadable", map[string]string{"0": ""}, GIDTable{}, "GID 0 of rxe0 port 1"},
		{"short form", map[string]string{"0": "fe80::1"}, GIDTable{}, "is not a GID"},
		{"upper case", map[string]string{"0": strings.ToUpper(used)}, GIDTable{}, "is not a GID"},
		{"two lines", map[string]string{"0": used + "\n" + used}, GIDTable{}, "is not a GID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			dir := "class/infiniband/rxe0/ports/1/gids"
			f.mkdir(dir)
			for name, row := range tt.rows {
				if row == "" {
					f.mkdir(dir + "/" + name)
					continue
				}
				f.write(dir+"/"+name, row)
			}
			got, err := (&System{SysRoot: f.root}).readGIDTable("rxe0", 1)
			switch {
			case tt.error == "" && err != nil:
				t.Fatalf("error %v", err)
			case tt.error != "" && (err == nil || !strings.Contains(err.Error(), tt.error)):
				t.Fatalf("error %v, want one saying %q", err, tt.error)
			case got != tt.want:
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestReadGIDTableWithoutTable checks that a port without gids is an
// error.
func TestReadGIDTableWithoutTable(t *testing.T) {
	f := newFixture(t)
	f.mkdir("class/infiniband/rxe0/ports/1")
	if _, err := (&System{SysRoot: f.root}).readGIDTable("rxe0", 1); err == nil {
		t.Error("no error for a port without a GID table")
	}
}

// TestParseRate parses the kernel's rate_show lines, whole and with
// ".5", and what is not one.
func TestParseRate(t *testing.T) {
	tests := []struct {
		in   string
		want float64 // bytes per second; -1: an error
	}{
		{"10 Gb/sec (1X QDR)\n", 10e9 / 8},
		{"100 Gb/sec (4X EDR)\n", 100e9 / 8},
		{"2.5 Gb/sec (1X SDR)\n", 2.5e9 / 8},
		{"56 Gb/sec (4X FDR)\n", 56e9 / 8},
		{"400 Gb/sec (4X NDR)\n", 400e9 / 8},
		{"10 Gb/sec (1X)\n", 10e9 / 8},
		{"10 Gb/sec (1X QDR)", -1},
		{"10.25 Gb/sec (1X QDR)\n", -1},
		{"-10 Gb/sec (1X QDR)\n", -1},
		{"10 Gbit/s\n", -1},
		{"\n", -1},
		{"10 Gb/sec (1X QDR)\nmore\n", -1},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			got, err := parseRate(tt.in)
			switch {
			case tt.want < 0 && err == nil:
				t.Errorf("got %v, want an error", got)
			case tt.want >= 0 && (err != nil || got != tt.want):
				t.Errorf("got %v %v, want %v", got, err, tt.want)
			}
		})
	}
}
