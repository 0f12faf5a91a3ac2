package rdma

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestMoveToNetns(t *testing.T) {
	tests := []struct {
		name       string
		dev        string
		fd         int
		byNameErr  error
		setErr     error
		wantDriver string // set: want *UnsupportedMoveError with this driver
		wantNoRDMA bool
		wantErr    bool
	}{
		{"moved", "mlx5_0", 7, nil, nil, "", false, false},
		{"EOPNOTSUPP from PCI driver", "erdma_0", 7, nil, syscall.EOPNOTSUPP, "erdma", false, true},
		{"EOPNOTSUPP from rxe (measured on 6.1)", "rxe0", 7, nil, syscall.EOPNOTSUPP, "rdma_rxe", false, true},
		{"no RDMA on lookup", "rxe0", 7, syscall.EPROTONOSUPPORT, nil, "", true, true},
		{"no RDMA on set", "mlx5_0", 7, nil, syscall.EPROTONOSUPPORT, "", true, true},
		{"unknown device", "nope", 7, nil, nil, "", false, true},
		{"other kernel error", "mlx5_0", 7, nil, syscall.EPERM, "", false, true},
		{"ENOENT on set is not no-RDMA", "mlx5_0", 7, nil, syscall.ENOENT, "", false, true},
		{"negative fd", "mlx5_0", -1, nil, nil, "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.ibDev("mlx5_0", "")
			f.pciDev("mlx5_0", "0000:3b:00.0", "mlx5_core")
			f.ibDev("erdma_0", "")
			f.pciDev("erdma_0", "0000:00:06.0", "erdma")
			nl := &fakeNL{links: links("mlx5_0", "erdma_0", "rxe0"), byNameErr: tt.byNameErr, setErr: tt.setErr}
			err := f.system(nl).MoveToNetns(tt.dev, tt.fd)
			if (err != nil) != tt.wantErr || errors.Is(err, ErrNoRDMA) != tt.wantNoRDMA {
				t.Fatalf("MoveToNetns = %v; wantErr %v, noRDMA %v", err, tt.wantErr, tt.wantNoRDMA)
			}
			checkUnsupported(t, err, tt.dev, tt.wantDriver)
			if !tt.wantErr && (len(nl.moves) != 1 || nl.moves[0] != move{tt.dev, uint32(tt.fd)}) {
				t.Fatalf("moves = %+v; want %s to fd %d", nl.moves, tt.dev, tt.fd)
			}
		})
	}
}

// checkUnsupported asserts err is (or, with driver "", is not) an
// *UnsupportedMoveError for dev with driver.
func checkUnsupported(t *testing.T, err error, dev, driver string) {
	t.Helper()
	var ume *UnsupportedMoveError
	if !errors.As(err, &ume) {
		if driver != "" {
			t.Fatalf("err = %v; want *UnsupportedMoveError", err)
		}
		return
	}
	if driver == "" {
		t.Fatalf("err = %v; unexpected *UnsupportedMoveError", err)
	}
	if ume.Device != dev || ume.Driver != driver || !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("UnsupportedMoveError = %+v; want device %s driver %s wrapping EOPNOTSUPP", ume, dev, driver)
	}
	for _, s := range []string{dev, driver, "exclusive", "6.12"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("message %q does not name %q", err.Error(), s)
		}
	}
}

func TestReturnToHost(t *testing.T) {
	tests := []struct {
		name       string
		openErr    error
		mode       string
		listErr    error
		setErr     error
		dev        string
		wantMoved  bool
		wantDriver string
		wantErr    bool
	}{
		{"moved back", nil, "exclusive", nil, nil, "mlx5_0", true, "", false},
		{"pod netns gone", syscall.ENOENT, "", nil, nil, "mlx5_0", false, "", false},
		{"no RDMA in kernel", syscall.EPROTONOSUPPORT, "", nil, nil, "mlx5_0", false, "", false},
		{"cannot enter netns", syscall.EPERM, "", nil, nil, "mlx5_0", false, "", true},
		{"shared mode: nothing moved", nil, "shared", nil, nil, "mlx5_0", false, "", false},
		{"device not in pod netns", nil, "exclusive", nil, nil, "mlx5_9", false, "", false},
		{"device left meanwhile", nil, "exclusive", nil, syscall.ENODEV, "mlx5_0", false, "", false},
		{"list fails", nil, "exclusive", syscall.EPERM, nil, "mlx5_0", false, "", true},
		{"EOPNOTSUPP", nil, "exclusive", nil, syscall.EOPNOTSUPP, "rxe0", false, "rdma_rxe", true},
		{"other set error", nil, "exclusive", nil, syscall.EBUSY, "mlx5_0", false, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nl := &fakeNL{mode: tt.mode, links: links("mlx5_0", "rxe0"), setErr: tt.setErr}
			if tt.listErr != nil {
				nl.listErrs = []error{tt.listErr}
			}
			closed := stubOpenNetnsNL(t, "/run/netns/pod", nl, tt.openErr)
			err := ReturnToHost(tt.dev, "/run/netns/pod", 5)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ReturnToHost = %v; wantErr %v", err, tt.wantErr)
			}
			checkUnsupported(t, err, tt.dev, tt.wantDriver)
			if moved := len(nl.moves) == 1 && nl.moves[0] == (move{tt.dev, 5}); moved != tt.wantMoved {
				t.Fatalf("moves = %+v; want moved=%v", nl.moves, tt.wantMoved)
			}
			if tt.openErr == nil && !*closed {
				t.Fatal("pod netns handle not closed")
			}
		})
	}
}

// stubOpenNetnsNL makes openNetnsNL return n (or err) for path; the returned
// flag reports whether the handle was closed.
func stubOpenNetnsNL(t *testing.T, path string, n Netlink, err error) *bool {
	t.Helper()
	closed := new(bool)
	orig := openNetnsNL
	t.Cleanup(func() { openNetnsNL = orig })
	openNetnsNL = func(p string) (Netlink, func(), error) {
		if p != path {
			t.Fatalf("opened %q, want %q", p, path)
		}
		if err != nil {
			return nil, nil, err
		}
		return n, func() { *closed = true }, nil
	}
	return closed
}

func TestReturnToHostInvalidArgs(t *testing.T) {
	for _, c := range []struct {
		dev, path string
		fd        int
	}{{"", "/p", 3}, {"rxe0", "", 3}, {"rxe0", "/p", -1}} {
		if err := ReturnToHost(c.dev, c.path, c.fd); err == nil {
			t.Errorf("ReturnToHost(%q, %q, %d) = nil; want error", c.dev, c.path, c.fd)
		}
	}
}

// TestReturnToHostMissingNetns runs the real netns opener on a path that
// does not exist: a gone pod netns is not an error.
func TestReturnToHostMissingNetns(t *testing.T) {
	if err := ReturnToHost("rxe0", filepath.Join(t.TempDir(), "gone"), 0); err != nil {
		t.Fatalf("ReturnToHost on missing netns = %v; want nil", err)
	}
}
