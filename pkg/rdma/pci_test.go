package rdma

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDevicesPCIThroughVirtio checks that the PCI function of an RDMA
// device comes from its own parent (PCI, or a virtio device on a PCI
// function) or, for a device registered without a parent, from its netdev's
// device link through the virtio parent. Soft devices never get one, and
// nothing else in a device link passes for a PCI address.
func TestDevicesPCIThroughVirtio(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(f *fixture)
		dev     string
		wantPCI string
		wantNd  string
	}{
		{"no parent, netdev on virtio (simrdma, eRDMA-like)", func(f *fixture) {
			f.ibDev("simrdma0", "5254:00ff:fe12:3456")
			f.gidNdev("simrdma0", "eth0")
			f.virtioNetdev("eth0", "52:54:00:12:34:56", "0000:00:03.0", "virtio0")
		}, "simrdma0", "0000:00:03.0", "eth0"},
		{"the kernel's layout: class entries link into devices/, device links are relative to them", func(f *fixture) {
			f.ibDev("simrdma0", "5254:00ff:fe12:3456")
			f.gidNdev("simrdma0", "eth0")
			nd := "devices/pci0000:00/0000:00:03.0/virtio0/net/eth0"
			f.write(nd+"/address", "52:54:00:12:34:56")
			f.symlink("../../"+nd, "class/net/eth0")
			f.symlink("../../../virtio0", nd+"/device")
		}, "simrdma0", "0000:00:03.0", "eth0"},
		{"kernel layout, RDMA device under its PCI function", func(f *fixture) {
			ib := "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/infiniband/mlx5_0"
			f.mkdir(ib)
			if err := os.Remove(filepath.Join(f.root, "class/infiniband")); err != nil {
				t.Fatal(err)
			}
			f.mkdir("class/infiniband")
			f.symlink("../../"+ib, "class/infiniband/mlx5_0")
			f.symlink("../../../0000:3b:00.0", ib+"/device")
		}, "mlx5_0", "0000:3b:00.0", ""},
		{"parent is a virtio device", func(f *fixture) {
			f.ibDev("erdma_0", "0216:3eff:fe01:0203")
			f.mkdir("devices/pci0000:00/0000:00:05.0/virtio2")
			f.symlink("../../../devices/pci0000:00/0000:00:05.0/virtio2", "class/infiniband/erdma_0/device")
			f.netdev("eth1", "00:16:3e:01:02:03", false)
		}, "erdma_0", "0000:00:05.0", "eth1"},
		{"parent PCI wins over the netdev's", func(f *fixture) {
			f.ibDev("mlx5_0", "")
			f.pciDev("mlx5_0", "0000:3b:00.0", "mlx5_core")
			f.gidNdev("mlx5_0", "eth0")
			f.virtioNetdev("eth0", "52:54:00:12:34:56", "0000:00:03.0", "virtio0")
		}, "mlx5_0", "0000:3b:00.0", "eth0"},
		{"soft device on a virtio NIC: none", func(f *fixture) {
			f.ibDev("rxe0", "")
			f.gidNdev("rxe0", "eth0")
			f.virtioNetdev("eth0", "52:54:00:12:34:56", "0000:00:03.0", "virtio0")
		}, "rxe0", "", "eth0"},
		{"virtio parent not on PCI (virtio-mmio): none", func(f *fixture) {
			f.ibDev("simrdma0", "")
			f.gidNdev("simrdma0", "eth0")
			f.write("class/net/eth0/address", "52:54:00:12:34:56")
			f.mkdir("devices/platform/a000000.virtio_mmio/virtio0")
			f.symlink("../../../devices/platform/a000000.virtio_mmio/virtio0", "class/net/eth0/device")
		}, "simrdma0", "", "eth0"},
		{"not virtioN: virtio-x, virtio: none", func(f *fixture) {
			f.ibDev("simrdma0", "")
			f.gidNdev("simrdma0", "eth0")
			f.write("class/net/eth0/address", "52:54:00:12:34:56")
			f.mkdir("devices/pci0000:00/0000:00:03.0/virtio")
			f.symlink("../../../devices/pci0000:00/0000:00:03.0/virtio", "class/net/eth0/device")
		}, "simrdma0", "", "eth0"},
		{"netdev without a device (veth): none", func(f *fixture) {
			f.ibDev("simrdma0", "")
			f.gidNdev("simrdma0", "veth0")
			f.netdev("veth0", "52:54:00:12:34:57", false)
		}, "simrdma0", "", "veth0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tt.setup(f)
			devs, err := f.system(&fakeNL{links: links(tt.dev)}).Devices()
			if err != nil || len(devs) != 1 {
				t.Fatalf("Devices() = %+v, %v", devs, err)
			}
			if d := devs[0]; d.PCI != tt.wantPCI || d.Netdev != tt.wantNd {
				t.Fatalf("%s = %+v; want PCI %q netdev %q", tt.dev, d, tt.wantPCI, tt.wantNd)
			}
		})
	}
}

func TestIsVirtio(t *testing.T) {
	for s, want := range map[string]bool{"virtio0": true, "virtio12": true, "virtio": false, "virtio-1": false, "xvirtio0": false, "virtio0a": false} {
		if got := isVirtio(s); got != want {
			t.Errorf("isVirtio(%q) = %v, want %v", s, got, want)
		}
	}
}
