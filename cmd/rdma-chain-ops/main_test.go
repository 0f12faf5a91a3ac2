package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestServesCommandsWhateverTheCNIEnvironment checks that an operator who
// exported cnitool's variables (CNI_PATH, even CNI_COMMAND) still gets the
// operator commands, and the plugin binary answers a CNI error instead of
// guessing.
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

// TestLinks is the operator binary's link guard: it serves the node's
// metrics (client_golang) and speaks CRI over gRPC for reconcile, which the
// plugin must not link (its own guard, plugins/meta/rdma-chain).
func TestLinks(t *testing.T) {
	linked := testenv.LinkedPackages(t, "./cmd/rdma-chain-ops")
	for _, p := range []string{"github.com/prometheus/client_golang/prometheus", "google.golang.org/grpc"} {
		if !linked[p] {
			t.Errorf("rdma-chain-ops does not link %s", p)
		}
	}
}
