//go:build vm

package vm

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// vmKernels are the kernels the tier boots: RC_VM_KERNELS, comma-separated
// (default every kernel of the table in docs/kernels.md's order).
func vmKernels() []string {
	var ks []string
	for _, k := range strings.Split(envOr("RC_VM_KERNELS", "6.1,6.12,7.3"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			ks = append(ks, k)
		}
	}
	return ks
}

// capTable is docs/kernels.md's capability table: kernel -> key -> value,
// keys as the caps scenario prints them (RC-CAP KEY VALUE).
type capTable struct {
	keys []string
	rows map[string]map[string]string
}

var capTableStart = "<!-- capability table: read by integration/vm -->"

// readCapTable parses the first markdown table after capTableStart in
// docs/kernels.md: a header "| kernel | KEY | ... |", a separator, one row
// per kernel. Anything else there fails the test: the table is the spec.
func readCapTable(t *testing.T) capTable {
	t.Helper()
	path := filepath.Join("..", "..", "docs", "kernels.md")
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the kernel capability table: %v", err)
	}
	defer f.Close()
	tab := capTable{rows: map[string]map[string]string{}}
	sc := bufio.NewScanner(f)
	in, line := false, 0
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if !in {
			in = l == capTableStart
			continue
		}
		if !strings.HasPrefix(l, "|") {
			if line == 0 && l == "" {
				continue
			}
			break
		}
		line++
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		switch line {
		case 1:
			if cells[0] != "kernel" || len(cells) < 2 {
				t.Fatalf("%s: the capability table's header must start with \"kernel\": %q", path, l)
			}
			tab.keys = cells[1:]
		case 2: // separator
		default:
			if len(cells) != len(tab.keys)+1 {
				t.Fatalf("%s: row %q has %d cells, want %d", path, l, len(cells), len(tab.keys)+1)
			}
			row := map[string]string{}
			for i, k := range tab.keys {
				row[k] = cells[i+1]
			}
			tab.rows[cells[0]] = row
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(tab.rows) == 0 {
		t.Fatalf("%s: no capability table after %q", path, capTableStart)
	}
	return tab
}

var capRE = regexp.MustCompile(`^RC-CAP (\S+) (\S+)$`)

// assertCaps fails unless the caps scenario's RC-CAP lines equal kernel k's
// row of the table, key for key, and the kernel's config agrees on SMC.
func assertCaps(t *testing.T, tab capTable, k, kdir string, con *console) {
	want, ok := tab.rows[k]
	if !ok {
		t.Fatalf("docs/kernels.md has no capability row for kernel %s: add it", k)
	}
	got := map[string]string{}
	for _, l := range con.lines {
		if m := capRE.FindStringSubmatch(l); m != nil {
			got[m[1]] = m[2]
		}
	}
	for _, key := range tab.keys {
		switch g, seen := got[key]; {
		case !seen:
			t.Errorf("kernel %s: the guest reported no %s (table: %s)", k, key, want[key])
		case g != want[key]:
			t.Errorf("kernel %s: %s is %s in the guest, %s in docs/kernels.md: update the table (and the docs) for this kernel",
				k, key, g, want[key])
		}
	}
	for key := range got {
		if !slices.Contains(tab.keys, key) {
			t.Errorf("kernel %s: the guest reported %s=%s, which docs/kernels.md's table has no column for", k, key, got[key])
		}
	}
	cfg, err := kernelConfig(kdir)
	if err != nil {
		t.Fatalf("kernel %s: %v", k, err)
	}
	smc := cfg["CONFIG_SMC"] == "y" || cfg["CONFIG_SMC"] == "m"
	if (want["smc"] == "yes") != smc {
		t.Errorf("kernel %s: table says smc=%s, its config has CONFIG_SMC=%q", k, want["smc"], cfg["CONFIG_SMC"])
	}
	t.Logf("kernel %s (%s) offers %v; config CONFIG_SMC=%q CONFIG_DIBS=%q", k, filepath.Base(kdir), got,
		cfg["CONFIG_SMC"], cfg["CONFIG_DIBS"])
}

// kernelConfig reads the kernel's build config from its extracted tree
// (config, as prepare.sh links it, else boot/config-KVER).
func kernelConfig(kdir string) (map[string]string, error) {
	path := filepath.Join(kdir, "config")
	if _, err := os.Stat(path); err != nil {
		kver, err := os.ReadFile(filepath.Join(kdir, "kver"))
		if err != nil {
			return nil, err
		}
		path = filepath.Join(kdir, "boot", "config-"+strings.TrimSpace(string(kver)))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && strings.HasPrefix(k, "CONFIG_") {
			cfg[k] = v
		}
	}
	return cfg, nil
}
