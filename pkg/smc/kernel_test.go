package smc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestOpenWithoutSMC runs against the real kernel only when it has no SMC
// family (the development machine): Open must report ErrUnavailable.
func TestOpenWithoutSMC(t *testing.T) {
	_, err := netlink.GenlFamilyGet(pnetFamilyName)
	testenv.KernelLacks(t, fmt.Sprintf("the %s family (lookup: %v)", pnetFamilyName, err), !errors.Is(err, unix.ENOENT))
	c, err := Open()
	if !errors.Is(err, ErrUnavailable) {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("Open() = %v, want ErrUnavailable", err)
	}
	if _, err := OpenAt("/proc/self/ns/net"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("OpenAt() = %v, want ErrUnavailable", err)
	}
}

func TestOpenAtBadPath(t *testing.T) {
	if _, err := OpenAt(filepath.Join(t.TempDir(), "missing")); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
}

// TestTCP2SMCAbsent needs setns (root); upstream kernels have no tcp2smc.
func TestTCP2SMCAbsent(t *testing.T) {
	testenv.RequireRoot(t) // setns
	_, err := os.Stat(tcp2smcPath)
	testenv.KernelLacks(t, "net.smc.tcp2smc", err == nil)
	ok, err := TCP2SMC("/proc/self/ns/net")
	if ok || err != nil {
		t.Fatalf("TCP2SMC = %v, %v; want false, nil", ok, err)
	}
}

func TestWriteIfExists(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tcp2smc")
	if ok, err := writeIfExists(p, "1"); ok || err != nil {
		t.Fatalf("missing file: %v %v", ok, err)
	}
	if err := os.WriteFile(p, []byte("0"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ok, err := writeIfExists(p, "1"); !ok || err != nil {
		t.Fatalf("existing file: %v %v", ok, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "1" {
		t.Fatalf("content %q", b)
	}
	if _, err := writeIfExists(dir, "1"); err == nil {
		t.Fatal("directory: want error")
	}
}
