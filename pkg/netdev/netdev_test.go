package netdev

import (
	"net"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/state"
)

func TestValidName(t *testing.T) {
	for name, ok := range map[string]bool{
		"net1": true, "eth0.100": true, "abcdefghijklmno": true,
		"": false, ".": false, "..": false, "abcdefghijklmnop": false,
		"a/b": false, "a:b": false, "a b": false,
	} {
		if err := validName(name); (err == nil) != ok {
			t.Errorf("validName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestSameMAC(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"AA:BB:CC:00:11:22", "aa:bb:cc:00:11:22", true},
		{"aa-bb-cc-00-11-22", "aa:bb:cc:00:11:22", true},
		{"aa:bb:cc:00:11:23", "aa:bb:cc:00:11:22", false},
		{"", "", false},
	}
	for _, tt := range tests {
		if got := sameMAC(tt.a, tt.b); got != tt.want {
			t.Errorf("sameMAC(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func addr(t *testing.T, cidr string, scope, flags int) netlink.Addr {
	t.Helper()
	ip, ipn, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	ipn.IP = ip
	return netlink.Addr{IPNet: ipn, Scope: scope, Flags: flags}
}

func TestKeepAddr(t *testing.T) {
	perm := unix.IFA_F_PERMANENT
	tests := []struct {
		name string
		a    netlink.Addr
		want bool
	}{
		{"v4 global", addr(t, "192.0.2.10/24", unix.RT_SCOPE_UNIVERSE, perm), true},
		{"v4 dhcp lifetime", addr(t, "192.0.2.10/24", unix.RT_SCOPE_UNIVERSE, 0), true},
		{"v4 host scope", addr(t, "127.0.0.1/8", unix.RT_SCOPE_HOST, perm), false},
		{"v4 link-local", addr(t, "169.254.1.1/16", unix.RT_SCOPE_LINK, perm), false},
		{"v6 static", addr(t, "fd00::10/64", unix.RT_SCOPE_UNIVERSE, perm|unix.IFA_F_NODAD), true},
		{"v6 dhcp /128", addr(t, "fd00::10/128", unix.RT_SCOPE_UNIVERSE, 0), true},
		{"v6 slaac", addr(t, "fd00::10/64", unix.RT_SCOPE_UNIVERSE, unix.IFA_F_MANAGETEMPADDR), false},
		{"v6 temporary", addr(t, "fd00::10/64", unix.RT_SCOPE_UNIVERSE, unix.IFA_F_TEMPORARY), false},
		{"v6 link-local", addr(t, "fe80::1/64", unix.RT_SCOPE_LINK, perm), false},
		{"v6 site", addr(t, "fec0::1/64", unix.RT_SCOPE_SITE, perm), true},
	}
	for _, tt := range tests {
		if got := keepAddr(tt.a); got != tt.want {
			t.Errorf("%s: keepAddr = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestChildLinkValidation(t *testing.T) {
	tests := []struct {
		kind state.LinkKind
		mode string
		ok   bool
	}{
		{state.LinkIPVlan, "l2", true}, {state.LinkIPVlan, "l3s", true}, {state.LinkIPVlan, "bridge", false},
		{state.LinkMACVlan, "bridge", true}, {state.LinkMACVlan, "passthru", true}, {state.LinkMACVlan, "l2", false},
		{"vlan", "", false},
	}
	for _, tt := range tests {
		spec := ChildSpec{Kind: tt.kind, Mode: tt.mode, Parent: "p", PodName: "net1"}
		l, err := childLink(spec, 3, 7)
		if (err == nil) != tt.ok {
			t.Errorf("childLink(%s/%s) err=%v, want ok=%v", tt.kind, tt.mode, err, tt.ok)
			continue
		}
		if err == nil && (l.Type() != string(tt.kind) || l.Attrs().ParentIndex != 3 || l.Attrs().Name != "net1") {
			t.Errorf("childLink(%s/%s) = %+v", tt.kind, tt.mode, l.Attrs())
		}
	}
}
