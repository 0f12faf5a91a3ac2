package rdma

import (
	"errors"
	"os"
	"testing"
)

func TestCheckMovable(t *testing.T) {
	cases := []struct {
		driver, release string
		movable         bool
	}{
		{"rdma_rxe", "6.12.117+deb12-amd64", false},
		{"siw", "6.12.0", false},
		{"erdma", "6.1.0-56-amd64", false},
		{"erdma", "5.10.134-16.al8.x86_64", false},
		{"erdma", "6.12.117+deb12-amd64", true},
		{"erdma", "7.0.1", true},
		{"erdma", "garbage", true},
		{"mlx5_core", "6.1.0", true},
		{"", "6.1.0", true},
	}
	for _, tc := range cases {
		err := CheckMovable(Device{Name: "dev0", Driver: tc.driver}, tc.release)
		var unsup *UnsupportedMoveError
		if (err == nil) != tc.movable || (err != nil && (!errors.As(err, &unsup) || unsup.Driver != tc.driver)) {
			t.Errorf("%s on %s: %v", tc.driver, tc.release, err)
		}
	}
	if KernelRelease() == "" {
		t.Error("KernelRelease is empty")
	}
}

// TestReturnToHostPlainFile checks that a netns path that a runtime
// unmounted but left as a plain file is gone: the kernel returns the
// devices when the netns dies, so ReturnToHost only looks for the device
// in the host netns.
func TestReturnToHostPlainFile(t *testing.T) {
	f := t.TempDir() + "/cni-netns"
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &System{Netns: stubNetns{at: openAs(t, 3, &fakeNL{mode: "exclusive", links: links("rxe0")}, nil)}}
	if err := s.ReturnToHost("rxe0", f, 3); err != nil {
		t.Errorf("ReturnToHost on a plain file: %v", err)
	}
}
