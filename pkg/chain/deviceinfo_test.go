package chain

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/devinfo"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// TestDeviceInfoFile checks that, with runtimeConfig CNIDeviceInfoFile,
// ADD writes the device's pci record and DEL removes it; a file already
// there is left, on ADD and on DEL; a failed ADD removes what it wrote; a
// device without a PCI address gets no file.
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

// TestDeviceInfoUnremovable checks that a device-info file DEL cannot
// remove (its folder replaced by a file after ADD, or not writable) is
// logged and forgotten: DEL succeeds and drops the record, and a second DEL
// has nothing left. The folders ADD created are removed on DEL when empty.
func TestDeviceInfoUnremovable(t *testing.T) {
	withPCI := rxe("mlx5_0", "veth0")
	withPCI.PCI = "0000:3b:00.0"
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, folder string)
		words  string
	}{
		{"removed as usual, with the folders ADD made", func(*testing.T, string) {}, ""},
		{"folder replaced by a file", func(t *testing.T, folder string) {
			if err := os.RemoveAll(folder); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(folder, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a directory"},
		{"read-only file system", func(t *testing.T, folder string) {
			// A bind mount read-only stands for a file system remounted
			// read-only: unlink answers EROFS.
			testenv.RequireRoot(t)
			if err := unix.Mount(folder, folder, "", unix.MS_BIND, ""); err != nil {
				t.Fatalf("bind mount: %v", err)
			}
			t.Cleanup(func() { _ = unix.Unmount(folder, unix.MNT_DETACH) })
			if err := unix.Mount("", folder, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
				t.Fatalf("remount read-only: %v", err)
			}
		}, "read-only file system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			folder := filepath.Join(dir, "devinfo", "cni")
			path := filepath.Join(folder, "net1-c1-eth0.json")
			w := &world{mode: rdma.ModeShared, devices: []rdma.Device{withPCI}}
			conf := `,"podSelection":"all","runtimeConfig":{"CNIDeviceInfoFile":"` + path + `"}`
			if err := w.plugin().Add(cmd(dir, conf, prevResult100)); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			tc.break_(t, folder)
			for i := range 2 {
				if err := w.plugin().Del(cmd(dir, conf, "")); err != nil {
					t.Fatalf("DEL %d: %v", i, err)
				}
			}
			if f := stateFiles(t, dir); len(f) != 0 {
				t.Errorf("records left: %v", f)
			}
			if tc.words == "" {
				if _, err := os.Lstat(filepath.Join(dir, "devinfo")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("folders ADD created left after DEL: %v", err)
				}
				return
			}
			if log := w.stderr.String(); !strings.Contains(log, "cannot remove the device-info file: forgotten") || !strings.Contains(log, tc.words) {
				t.Errorf("log %q does not say the file was forgotten (%s)", log, tc.words)
			}
		})
	}
}
