package rdma

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
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
		enterErr   error // from entering the pod netns
		mode       string
		listErr    error
		setErr     error
		afterSet   []string // pod devices listed after a failed set (nil: unchanged)
		dev        string
		wantMoved  bool
		wantDriver string
		wantErr    bool
	}{
		{"moved back", nil, "exclusive", nil, nil, nil, "mlx5_0", true, "", false},
		{"cannot enter netns", syscall.EPERM, "", nil, nil, nil, "mlx5_0", false, "", true},
		{"no RDMA in kernel", nil, "", syscall.EPROTONOSUPPORT, nil, nil, "mlx5_0", false, "", false},
		{"shared mode: nothing moved", nil, "shared", nil, nil, nil, "mlx5_0", false, "", false},
		{"device not in pod netns", nil, "exclusive", nil, nil, nil, "mlx5_9", false, "", false},
		{"ENODEV, pod no longer lists it", nil, "exclusive", nil, syscall.ENODEV, []string{"rxe0"}, "mlx5_0", false, "", false},
		{"ENODEV, pod still lists it", nil, "exclusive", nil, syscall.ENODEV, nil, "mlx5_0", false, "", true},
		{"list fails", nil, "exclusive", syscall.EPERM, nil, nil, "mlx5_0", false, "", true},
		{"EOPNOTSUPP", nil, "exclusive", nil, syscall.EOPNOTSUPP, nil, "rxe0", false, "rdma_rxe", true},
		{"other set error", nil, "exclusive", nil, syscall.EBUSY, nil, "mlx5_0", false, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nl := &fakeNL{mode: tt.mode, links: links("mlx5_0", "rxe0"), setErr: tt.setErr}
			if tt.listErr != nil {
				nl.listErrs = []error{tt.listErr}
			}
			if errors.Is(tt.listErr, syscall.EPROTONOSUPPORT) {
				nl.modeErr = tt.listErr
			}
			if tt.afterSet != nil {
				nl.linksAfterSet = links(tt.afterSet...)
			}
			enter, entered := enterAs(t, "/run/netns/pod", nl, tt.enterErr)
			// At is never used: the pod netns exists.
			s := &System{Netns: stubNetns{enter: enter, at: openAs(t, 5, &fakeNL{mode: "exclusive"}, nil)}}
			err := s.ReturnToHost(tt.dev, "/run/netns/pod", 5)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ReturnToHost = %v; wantErr %v", err, tt.wantErr)
			}
			checkUnsupported(t, err, tt.dev, tt.wantDriver)
			if moved := len(nl.moves) == 1 && nl.moves[0] == (move{tt.dev, 5}); moved != tt.wantMoved {
				t.Fatalf("moves = %+v; want moved=%v", nl.moves, tt.wantMoved)
			}
			if !*entered {
				t.Fatal("the pod netns was not entered")
			}
		})
	}
}

// TestReturnToHostNetnsGone checks that with the pod netns path gone, the
// kernel gives the device back to init_net when the netns dies; ReturnToHost
// waits for it in the host netns, bounded by HostWait.
func TestReturnToHostNetnsGone(t *testing.T) {
	tests := []struct {
		name    string
		host    *fakeNL
		openErr error
		wantErr bool
	}{
		{"device back in host", &fakeNL{mode: "exclusive", links: links("mlx5_0")}, nil, false},
		{"device comes back later", &fakeNL{mode: "exclusive", listSeq: [][]string{{}, {"rxe0"}, {"mlx5_0"}}}, nil, false},
		{"device never comes back", &fakeNL{mode: "exclusive", links: links("rxe0")}, nil, true},
		{"shared mode", &fakeNL{mode: "shared"}, nil, false},
		{"no RDMA in kernel", nil, syscall.EPROTONOSUPPORT, false},
		{"host netns unreadable", nil, syscall.EPERM, true},
		{"host list fails", &fakeNL{mode: "exclusive", listErrs: []error{syscall.EPERM}}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			enter, _ := enterAs(t, "/run/netns/pod", nil, netnsid.ErrGone)
			s := &System{Netns: stubNetns{enter: enter, at: openAs(t, 5, tt.host, tt.openErr)}, HostWait: 200 * time.Millisecond}
			err := s.ReturnToHost("mlx5_0", "/run/netns/pod", 5)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ReturnToHost = %v; wantErr %v", err, tt.wantErr)
			}
			if tt.host != nil && len(tt.host.moves) != 0 {
				t.Fatalf("moved %+v from the host netns", tt.host.moves)
			}
		})
	}
}

func TestInNetns(t *testing.T) {
	tests := []struct {
		name     string
		enterErr error
		listErr  error
		want     bool
		wantErr  bool
	}{
		{"present", nil, nil, true, false},
		{"netns gone", netnsid.ErrGone, nil, false, true},
		{"list fails", nil, syscall.EPERM, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nl := &fakeNL{mode: "exclusive", links: links("mlx5_0")}
			if tt.listErr != nil {
				nl.listErrs = []error{tt.listErr}
			}
			enter, _ := enterAs(t, "/run/netns/pod", nl, tt.enterErr)
			got, err := (&System{Netns: stubNetns{enter: enter}}).InNetns("mlx5_0", "/run/netns/pod")
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Fatalf("InNetns = %v, %v; want %v, err %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	enter, _ := enterAs(t, "/run/netns/pod", &fakeNL{mode: "exclusive", links: links("rxe0")}, nil)
	if got, err := (&System{Netns: stubNetns{enter: enter}}).InNetns("mlx5_0", "/run/netns/pod"); got || err != nil {
		t.Fatalf("InNetns(absent) = %v, %v; want false, nil", got, err)
	}
}

// stubNetns is a Netns whose nil methods are the kernel's.
type stubNetns struct {
	enter func(path string, fn func(Netlink) error) error
	at    func(fd int) (Netlink, func(), error)
}

func (s stubNetns) Enter(path string, fn func(Netlink) error) error {
	if s.enter == nil {
		return kernelNetns{}.Enter(path, fn)
	}
	return s.enter(path, fn)
}

func (s stubNetns) At(fd int) (Netlink, func(), error) {
	if s.at == nil {
		return kernelNetns{}.At(fd)
	}
	return s.at(fd)
}

// enterAs is an Enter that runs fn with n for path (or fails with err);
// the flag reports whether fn ran.
func enterAs(t *testing.T, path string, n Netlink, err error) (func(string, func(Netlink) error) error, *bool) {
	t.Helper()
	entered := new(bool)
	if err != nil {
		*entered = true // nothing to enter
	}
	return func(p string, fn func(Netlink) error) error {
		if p != path {
			t.Fatalf("entered %q, want %q", p, path)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		*entered = true
		return fn(n)
	}, entered
}

// openAs is an At that returns n (or err) for fd.
func openAs(t *testing.T, fd int, n *fakeNL, err error) func(int) (Netlink, func(), error) {
	t.Helper()
	return func(got int) (Netlink, func(), error) {
		if got != fd {
			t.Fatalf("opened fd %d, want %d", got, fd)
		}
		if err != nil {
			return nil, nil, err
		}
		return n, func() {}, nil
	}
}

func TestReturnToHostInvalidArgs(t *testing.T) {
	for _, c := range []struct {
		dev, path string
		fd        int
	}{{"", "/p", 3}, {"rxe0", "", 3}, {"rxe0", "/p", -1}} {
		if err := New().ReturnToHost(c.dev, c.path, c.fd); err == nil {
			t.Errorf("ReturnToHost(%q, %q, %d) = nil; want error", c.dev, c.path, c.fd)
		}
	}
}

// TestReturnToHostMissingNetns runs the real netns check on a path that
// does not exist: a gone pod netns is not an error once the device is back
// in the host netns.
func TestReturnToHostMissingNetns(t *testing.T) {
	s := &System{Netns: stubNetns{at: openAs(t, 0, &fakeNL{mode: "exclusive", links: links("rxe0")}, nil)}}
	if err := s.ReturnToHost("rxe0", filepath.Join(t.TempDir(), "gone"), 0); err != nil {
		t.Fatalf("ReturnToHost on missing netns = %v; want nil", err)
	}
}
