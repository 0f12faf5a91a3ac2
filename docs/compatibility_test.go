package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestCompatibility checks that every row of compatibility.md's table is
// tested or sourced; a tested row names a tier of development.md's tier
// table ("VM tier"), a sourced row names what it rests on. The parts the
// table must cover are all there.
func TestCompatibility(t *testing.T) {
	doc, err := os.ReadFile("compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	dev, err := os.ReadFile("development.md")
	if err != nil {
		t.Fatal(err)
	}
	tiers := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| ([A-Za-z-]+)(?: \\([^)]*\\))? \\| `make test-").FindAllStringSubmatch(string(dev), -1) {
		tiers[m[1]] = true
	}
	if len(tiers) < 5 {
		t.Fatalf("read the tiers %v from development.md: the parsing is broken", tiers)
	}
	tierName := regexp.MustCompile(`([A-Za-z-]+) (?:and ([A-Za-z-]+) )?tiers?\b`)
	parts := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if !strings.HasPrefix(line, "| ") || len(cells) != 4 || cells[0] == "part" {
			continue
		}
		part, status, by := strings.Fields(cells[0])[0], strings.TrimSpace(cells[2]), cells[3]
		parts[strings.TrimSuffix(part, ":")] = true
		switch {
		case strings.HasPrefix(status, "tested"):
			named := false
			for _, m := range tierName.FindAllStringSubmatch(by, -1) {
				named = named || tiers[m[1]] || tiers[m[2]]
			}
			if !named {
				t.Errorf("compatibility.md: %s %s is tested, by no tier of development.md (%v): %q", cells[0], cells[1], tiers, by)
			}
		case status == "sourced":
			if len(strings.Fields(by)) < 3 {
				t.Errorf("compatibility.md: %s %s is sourced, on nothing named", cells[0], cells[1])
			}
		default:
			t.Errorf("compatibility.md: %s %s is %q, neither tested nor sourced", cells[0], cells[1], status)
		}
	}
	for _, want := range []string{"Kubernetes", "containerd", "CRI-O", "kernel", "NIC", "Terway", "Multus"} {
		if !parts[want] {
			t.Errorf("compatibility.md has no row for %s (rows: %v)", want, parts)
		}
	}
}
