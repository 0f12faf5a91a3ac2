package testonly

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestProductImportsNone checks that no package of the product (the
// binaries and every package under pkg/ and plugins/, without their
// tests) depends on a package of this room.
func TestProductImportsNone(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	cmd := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}: {{join .Imports \" \"}}",
		"./plugins/...", "./cmd/...", "./pkg/...")
	cmd.Dir = testenv.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const room = "github.com/rdma-chain/rdma-chain/internal/testonly"
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 50 {
		t.Fatalf("go list listed %d packages: %s", len(lines), out)
	}
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, ": ")
		for _, imp := range strings.Fields(imports) {
			if imp == room || strings.HasPrefix(imp, room+"/") {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
}

// TestPrivilegedPackagesCheckLeaks checks that every package whose tests
// change the host or start daemons (a case gated by testenv.Privileged,
// the containerd tier, the tiers that boot qemu) runs them under
// leakcheck's TestMain, so a tier leaves the machine as it found it.
func TestPrivilegedPackagesCheckLeaks(t *testing.T) {
	gated, checked := map[string]bool{}, map[string]bool{}
	root := testenv.RepoRoot()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".tools" || d.Name() == ".cache" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		if strings.Contains(string(b), "testenv.Privileged(") || startsDaemons(string(b)) {
			gated[dir] = true
		}
		if strings.Contains(string(b), "leakcheck.Main(m") || strings.Contains(string(b), "leakcheck.MainHost(m") ||
			dir == "internal/testonly/leakcheck" && strings.Contains(string(b), "\tMain(m)") {
			checked[dir] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(gated) < 10 {
		t.Fatalf("found %d packages with privileged cases: %v", len(gated), gated)
	}
	for dir := range gated {
		if !checked[dir] {
			t.Errorf("%s has privileged cases but no TestMain calling leakcheck.Main", dir)
		}
	}
}

// startsDaemons reports whether a test file src belongs to a tier whose
// binary starts daemons on the host: containerd's, or one that boots
// qemu (the VM, node and cluster tiers; their guests' packages carry no
// build tag).
func startsDaemons(src string) bool {
	for _, tag := range []string{"containerd", "vm", "node", "cluster"} {
		if strings.HasPrefix(src, "//go:build "+tag+"\n") {
			return true
		}
	}
	return false
}
