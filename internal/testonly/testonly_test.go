package testonly

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestProductImportsNone: no package of the product (the binaries and
// every package under pkg/ and plugins/, without their tests) depends on
// a package of this room.
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
