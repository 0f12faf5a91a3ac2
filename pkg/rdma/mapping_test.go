package rdma

import (
	"testing"
)

func TestNetdevMapping(t *testing.T) {
	const (
		guid = "0216:3eff:fe01:0203"
		mac  = "00:16:3e:01:02:03"
	)
	tests := []struct {
		name  string
		build func(f *fixture)
		ports map[string]string // netlink port 1 netdev, nil: no PortNetdever
		want  string
	}{
		{"ndevs file", func(f *fixture) {
			f.gidNdev("dev0", "eth0")
			f.netdev("eth0", "52:54:00:00:00:01", true)
		}, nil, "eth0"},
		{"PCI sibling", func(f *fixture) {
			f.pciDev("dev0", "0000:3b:00.0", "mlx5_core", "ens1f0")
			f.netdev("ens1f0", "b8:59:9f:00:00:01", true)
		}, nil, "ens1f0"},
		{"PCI siblings pick first present", func(f *fixture) {
			f.pciDev("dev0", "0000:3b:00.0", "mlx5_core", "a_gone", "ens1f0", "ens1f0v0")
			f.netdev("ens1f0", "b8:59:9f:00:00:01", true)
			f.netdev("ens1f0v0", "b8:59:9f:00:00:02", true)
		}, nil, "ens1f0"},
		{"eRDMA GUID rule", func(f *fixture) {
			f.pciDev("dev0", "0000:00:06.0", "erdma")
			f.netdev("eth0", "00:16:3e:aa:aa:aa", true)
			f.netdev("eth1", mac, true)
		}, nil, "eth1"},
		{"GUID rule prefers physical over ipvlan child with same MAC", func(f *fixture) {
			f.netdev("aa_ipvl", mac, false)
			f.netdev("eth1", mac, true)
		}, nil, "eth1"},
		{"GUID rule ignores loopback and bad addresses", func(f *fixture) {
			f.netdev("lo", "00:00:00:00:00:00", false)
			f.netdev("ib0", "80:00:00:48:fe:80:00:00:00:00:00:00:02:16:3e:ff:fe:01:02:03", true)
			f.write("class/net/bad/address", "zz")
		}, nil, ""},
		{"netlink port netdev", func(f *fixture) {
			f.pciDev("dev0", "0000:3b:00.0", "mlx5_core", "ens1f0")
			f.netdev("ens1f0", "b8:59:9f:00:00:01", true)
		}, map[string]string{"dev0": "eth9"}, "eth9"},
		{"ndevs beats netlink port", func(f *fixture) {
			f.gidNdev("dev0", "eth0")
			f.netdev("eth0", "52:54:00:00:00:01", true)
		}, map[string]string{"dev0": "eth9"}, "eth0"},
		{"ndevs beats PCI sibling and GUID", func(f *fixture) {
			f.gidNdev("dev0", "eth0")
			f.netdev("eth0", "52:54:00:00:00:01", true)
			f.pciDev("dev0", "0000:3b:00.0", "mlx5_core", "ens1f0")
			f.netdev("ens1f0", "b8:59:9f:00:00:01", true)
			f.netdev("eth1", mac, true)
		}, nil, "eth0"},
		{"PCI sibling beats GUID", func(f *fixture) {
			f.pciDev("dev0", "0000:3b:00.0", "mlx5_core", "ens1f0")
			f.netdev("ens1f0", "b8:59:9f:00:00:01", true)
			f.netdev("eth1", mac, true)
		}, nil, "ens1f0"},
		{"ndevs names a netdev of another netns: fall through", func(f *fixture) {
			f.gidNdev("dev0", "podveth")
			f.netdev("eth1", mac, true)
		}, nil, "eth1"},
		{"empty ndevs file: fall through", func(f *fixture) {
			f.gidNdev("dev0", "")
			f.netdev("eth1", mac, true)
		}, nil, "eth1"},
		{"unmapped", func(f *fixture) {
			f.netdev("eth0", "52:54:00:00:00:01", true)
		}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.ibDev("dev0", guid)
			tt.build(f)
			var n Netlink = &fakeNL{links: links("dev0")}
			if tt.ports != nil {
				n = portNL{fakeNL: n.(*fakeNL), ports: tt.ports}
			}
			devs, err := f.system(n).Devices()
			if err != nil {
				t.Fatal(err)
			}
			if len(devs) != 1 || devs[0].Netdev != tt.want {
				t.Fatalf("Devices() = %+v; want dev0 on %q", devs, tt.want)
			}
		})
	}
}

func TestNdevName(t *testing.T) {
	// Reply payload: DEV_INDEX=0, PORT_INDEX=1, NDEV_INDEX=2, NDEV_NAME="eth0".
	msg := []byte{
		8, 0, 1, 0, 0, 0, 0, 0,
		8, 0, 3, 0, 1, 0, 0, 0,
		8, 0, 50, 0, 2, 0, 0, 0,
		9, 0, 51, 0, 'e', 't', 'h', '0', 0, 0, 0, 0,
	}
	if got, err := ndevName(msg); err != nil || got != "eth0" {
		t.Fatalf("ndevName = %q, %v; want eth0", got, err)
	}
	if got, err := ndevName(msg[:24]); err != nil || got != "" {
		t.Fatalf("ndevName without NDEV_NAME = %q, %v; want empty", got, err)
	}
}
