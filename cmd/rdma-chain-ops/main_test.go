package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestServesCommandsWhateverTheCNIEnvironment: an operator who exported
// cnitool's variables (CNI_PATH, even CNI_COMMAND) still gets the operator
// commands, and the plugin binary answers a CNI error instead of guessing.
func TestServesCommandsWhateverTheCNIEnvironment(t *testing.T) {
	dir := t.TempDir()
	for out, pkg := range map[string]string{"ops": "./cmd/rdma-chain-ops", "plugin": "./plugins/meta/rdma-chain"} {
		if b, err := testenv.GoCmd("build", "-o", filepath.Join(dir, out), pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	tests := []struct {
		bin, env string
		args     []string
		code     int
		want     string
	}{
		{"ops", "CNI_PATH=/opt/cni/bin", []string{"--version"}, 0, "rdma-chain-ops dev"},
		{"ops", "CNI_COMMAND=ADD", []string{"validate", "--help"}, 0, "usage: rdma-chain-ops validate"},
		{"ops", "CNI_PATH=/opt/cni/bin", nil, 2, "inspect"},
		{"plugin", "CNI_PATH=/opt/cni/bin", []string{"inspect"}, 0, "rdma-chain-ops (inspect"},
	}
	for _, tt := range tests {
		t.Run(tt.bin+" "+tt.env+" "+strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := exec.Command(filepath.Join(dir, tt.bin), tt.args...)
			cmd.Env = append(os.Environ(), tt.env)
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != tt.code || !strings.Contains(string(out), tt.want) {
				t.Errorf("exit %d (want %d), output %q (want %q in it)", code, tt.code, out, tt.want)
			}
		})
	}
}

// TestPluginLinksNoMetricsOrGRPC: client_golang (and the expfmt parser the
// tests use) and grpc-go belong to the operator binary only. The plugin
// starts for every pod on every verb; either would add package init and
// binary size to each start (docs/performance.md).
func TestPluginLinksNoMetricsOrGRPC(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../../plugins/meta/rdma-chain").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 50 {
		t.Fatalf("go list -deps listed only %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		if strings.HasPrefix(p, "github.com/prometheus/") || p == "google.golang.org/grpc" || strings.HasPrefix(p, "google.golang.org/grpc/") {
			t.Errorf("the CNI plugin links %s", p)
		}
	}
	ops, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil || !strings.Contains(string(ops), "github.com/prometheus/client_golang/prometheus\n") {
		t.Errorf("the operator binary does not link client_golang (the check above would prove nothing): %v", err)
	}
}
