package chain

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/devinfo"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// With runtimeConfig CNIDeviceInfoFile, ADD writes the device's pci record
// and DEL removes it; a file already there is left, on ADD and on DEL; a
// failed ADD removes what it wrote; a device without a PCI address gets no
// file.
func TestDeviceInfoFile(t *testing.T) {
	withPCI := rxe("mlx5_0", "veth0")
	withPCI.PCI = "0000:3b:00.0"
	ours := string(devinfo.Content("0000:3b:00.0", "mlx5_0"))
	cases := []struct {
		name      string
		dev       rdma.Device
		existing  string // the file's content before ADD, "" for none
		failOn    string // a step after the write that fails ADD
		afterAdd  string // the file's content after ADD, "" for none
		afterDel  string
		wantAddOK bool
	}{
		{"written and removed", withPCI, "", "", ours, "", true},
		{"foreign file kept", withPCI, "dp\n", "", "dp\n", "dp\n", true},
		{"same content, not ours", withPCI, ours, "", ours, ours, true},
		{"failed ADD removes it", withPCI, "", "EnsurePnet", "", "", false},
		{"no PCI address", rxe("rxe0", "veth0"), "", "", "", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "devinfo", "cni", "net1-c1-eth0.json")
			if tc.existing != "" {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.existing), 0o444); err != nil {
					t.Fatal(err)
				}
			}
			w := &world{mode: rdma.ModeShared, devices: []rdma.Device{tc.dev}}
			// SMC-R follows the device-info file in ADD: its failure
			// rolls the file back.
			conf := `,"podSelection":"all","smcr":{"onUnsupported":"fail"},"runtimeConfig":{"CNIDeviceInfoFile":"` + path +
				`","io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}}`
			if tc.failOn != "" {
				w.failOn = map[string]error{tc.failOn: errors.New("injected")}
			}
			err := w.plugin().Add(cmd(dir, conf, prevResult100))
			if (err == nil) != tc.wantAddOK {
				t.Fatalf("ADD: %v", err)
			}
			assertFile(t, path, tc.afterAdd, "after ADD")
			if err := w.plugin().Del(cmd(dir, conf, "")); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			assertFile(t, path, tc.afterDel, "after DEL")
		})
	}
}

func assertFile(t *testing.T, path, want, when string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if want == "" {
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %s holds %q, want no file", when, path, got)
		}
		return
	}
	if string(got) != want {
		t.Errorf("%s: %s holds %q (%v), want %q", when, path, got, err, strings.TrimSpace(want))
	}
}
