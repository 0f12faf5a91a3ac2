package rdma

import (
	"errors"
	"reflect"
	"syscall"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/vishvananda/netlink"
)

func TestDevicesNoRDMA(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		wantNoRDM bool
	}{
		{"EPROTONOSUPPORT (measured)", syscall.EPROTONOSUPPORT, true},
		{"EOPNOTSUPP", syscall.EOPNOTSUPP, true},
		{"ENOENT", syscall.ENOENT, true},
		{"message only", errors.New("protocol not supported"), true},
		{"other error", syscall.EPERM, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &System{SysRoot: t.TempDir(), NL: &fakeNL{listErrs: []error{tt.err}}}
			devs, err := s.Devices()
			if err == nil || devs != nil {
				t.Fatalf("Devices() = %v, %v; want error", devs, err)
			}
			if errors.Is(err, ErrNoRDMA) != tt.wantNoRDM {
				t.Fatalf("errors.Is(%v, ErrNoRDMA) = %v, want %v", err, !tt.wantNoRDM, tt.wantNoRDM)
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("error %v does not wrap %v", err, tt.err)
			}
		})
	}
}

func TestDevicesEmptySubsystem(t *testing.T) {
	f := newFixture(t)
	devs, err := f.system(&fakeNL{}).Devices()
	if err != nil || devs == nil || len(devs) != 0 {
		t.Fatalf("Devices() = %#v, %v; want empty non-nil slice", devs, err)
	}
}

func TestDevicesFields(t *testing.T) {
	f := newFixture(t)
	f.ibDev("mlx5_1", "b859:9f03:00d4:6a80")
	f.pciDev("mlx5_1", "0000:3b:00.1", "mlx5_core", "ens1f1")
	f.netdev("ens1f1", "b8:59:9f:d4:6a:81", true)
	f.ibDev("erdma_0", "0216:3eff:fe01:0203")
	f.pciDev("erdma_0", "0000:00:06.0", "erdma")
	f.netdev("eth1", "00:16:3e:01:02:03", true)
	f.ibDev("rxe0", "")
	f.gidNdev("rxe0", "eth0")
	f.netdev("eth0", "52:54:00:12:34:56", true)
	nl := &fakeNL{links: links("rxe0", "mlx5_1", "erdma_0")}
	nl.links[0].Attrs.NodeGuid = "56:34:12:fe:ff:00:54:50"

	devs, err := f.system(nl).Devices()
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{Name: "erdma_0", Driver: "erdma", NodeGUID: "0216:3eff:fe01:0203", Netdev: "eth1", PCI: "0000:00:06.0"},
		{Name: "mlx5_1", Driver: "mlx5_core", NodeGUID: "b859:9f03:00d4:6a80", Netdev: "ens1f1", PCI: "0000:3b:00.1"},
		{Name: "rxe0", Driver: "rdma_rxe", NodeGUID: "5054:00ff:fe12:3456", Netdev: "eth0"},
	}
	if !reflect.DeepEqual(devs, want) {
		t.Fatalf("Devices() =\n%+v\nwant\n%+v", devs, want)
	}
}

func TestDevicesSoftDriverWinsOverParentNIC(t *testing.T) {
	f := newFixture(t)
	f.ibDev("siw0", "")
	f.pciDev("siw0", "0000:00:03.0", "virtio-pci")
	devs, err := f.system(&fakeNL{links: links("siw0")}).Devices()
	if err != nil {
		t.Fatal(err)
	}
	if d := devs[0]; d.Driver != "siw" || d.PCI != "" {
		t.Fatalf("siw0 = %+v; want driver siw, no PCI", d)
	}
}

func TestDevicesSysfsFallback(t *testing.T) {
	f := newFixture(t)
	f.ibDev("rxe0", "5054:00ff:fe12:3456")
	f.gidNdev("rxe0", "eth0")
	f.netdev("eth0", "52:54:00:12:34:56", true)
	devs, err := f.system(&fakeNL{listErrs: []error{syscall.EOPNOTSUPP}}).Devices()
	if err != nil || len(devs) != 1 || devs[0].Netdev != "eth0" {
		t.Fatalf("Devices() = %+v, %v; want rxe0 on eth0 from sysfs", devs, err)
	}
}

func TestDevicesDumpInterrupted(t *testing.T) {
	f := newFixture(t)
	nl := &fakeNL{links: links("rxe0"), listErrs: []error{netlink.ErrDumpInterrupted}}
	devs, err := f.system(nl).Devices()
	if err != nil || len(devs) != 1 {
		t.Fatalf("Devices() = %+v, %v; want retry to succeed", devs, err)
	}
	always := make([]error, nldump.Attempts)
	for i := range always {
		always[i] = netlink.ErrDumpInterrupted
	}
	nl = &fakeNL{listErrs: always}
	if _, err := f.system(nl).Devices(); !errors.Is(err, netlink.ErrDumpInterrupted) {
		t.Fatalf("Devices() err = %v; want ErrDumpInterrupted after retries", err)
	}
}

// TestDevicesERDMAByGUID checks that an eRDMA device maps to the netdev
// whose MAC's EUI-64 is its node GUID, and to no other.
func TestDevicesERDMAByGUID(t *testing.T) {
	f := newFixture(t)
	f.ibDev("erdma_0", "0216:3eff:fe01:0203")
	f.netdev("eth1", "00:16:3e:01:02:03", true)
	f.netdev("eth2", "00:16:3e:0a:0b:0c", true)
	devs, err := f.system(&fakeNL{links: links("erdma_0")}).Devices()
	if err != nil || len(devs) != 1 || devs[0].Name != "erdma_0" || devs[0].Netdev != "eth1" {
		t.Fatalf("Devices() = %+v, %v; want erdma_0 on eth1", devs, err)
	}
}
