package addr

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// ipc builds an IPConfig for cidr on interface index idx.
func ipc(t *testing.T, cidr string, idx int) *types100.IPConfig {
	t.Helper()
	ip, n, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	return &types100.IPConfig{Interface: types100.Int(idx), Address: net.IPNet{IP: ip, Mask: n.Mask}}
}

// route builds a route to cidr.
func route(t *testing.T, cidr string) *types.Route {
	t.Helper()
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	return &types.Route{Dst: *n}
}

// TestReportIPs checks that ReportIPs appends the RDMA interface's IPs
// pointing at it, without gateways, and its routes except default
// routes.
func TestReportIPs(t *testing.T) {
	dns := types.DNS{Nameservers: []string{"10.96.0.10"}}
	dst := &types100.Result{
		CNIVersion: "1.1.0",
		Interfaces: []*types100.Interface{{Name: "eth0"}, {Name: "rdma0", Sandbox: "/ns"}},
		IPs:        []*types100.IPConfig{ipc(t, "10.0.0.5/24", 0)},
		Routes:     []*types.Route{route(t, "0.0.0.0/0")},
		DNS:        dns,
	}
	gw6 := ipc(t, "fd00:77::10/64", 0)
	gw6.Gateway = net.ParseIP("fd00:77::1")
	res := &types100.Result{
		IPs:    []*types100.IPConfig{gw6, ipc(t, "10.77.0.2/24", 7)},
		Routes: []*types.Route{route(t, "fd00:78::/64"), route(t, "::/0"), route(t, "0.0.0.0/0")},
		DNS:    types.DNS{Nameservers: []string{"1.1.1.1"}},
	}
	ReportIPs(dst, res, 1)
	wantIPs := []string{"10.0.0.5/24", "fd00:77::10/64", "10.77.0.2/24"}
	wantIdx := []int{0, 1, 1}
	if len(dst.IPs) != len(wantIPs) {
		t.Fatalf("IPs = %v", dst.IPs)
	}
	for i, ip := range dst.IPs {
		if ip.Address.String() != wantIPs[i] || *ip.Interface != wantIdx[i] {
			t.Errorf("IP %d = %s if %d, want %s if %d", i, ip.Address.String(), *ip.Interface, wantIPs[i], wantIdx[i])
		}
		if i > 0 && ip.Gateway != nil {
			t.Errorf("IP %d kept gateway %v", i, ip.Gateway)
		}
	}
	if len(dst.Routes) != 2 || dst.Routes[1].Dst.String() != "fd00:78::/64" {
		t.Errorf("routes = %v, want the primary's and fd00:78::/64 only", dst.Routes)
	}
	if len(dst.DNS.Nameservers) != 1 || dst.DNS.Nameservers[0] != "10.96.0.10" || len(dst.Interfaces) != 2 {
		t.Errorf("DNS or interfaces changed: %+v %v", dst.DNS, dst.Interfaces)
	}
	if *res.IPs[1].Interface != 7 || res.IPs[0].Gateway == nil {
		t.Errorf("source result modified: %+v", res.IPs)
	}
}

func TestReportIPsNil(t *testing.T) {
	ReportIPs(nil, &types100.Result{}, 0)
	dst := &types100.Result{}
	ReportIPs(dst, nil, 0)
	if len(dst.IPs) != 0 {
		t.Errorf("IPs = %v", dst.IPs)
	}
}

// TestClaimIndexless checks that ClaimIndexless points IPs without an
// interface index at the primary's pod interface, adding its entry when
// the primary reported only host-side interfaces or none.
func TestClaimIndexless(t *testing.T) {
	indexless := func() *types100.IPConfig { ip := ipc(t, "10.0.0.5/32", 0); ip.Interface = nil; return ip }
	cases := []struct {
		name    string
		ifs     []*types100.Interface
		ips     []*types100.IPConfig
		wantAt  int
		wantIfs []string
	}{
		{"indexed primary", []*types100.Interface{{Name: "veth1"}, {Name: "eth0", Sandbox: "/ns"}},
			[]*types100.IPConfig{ipc(t, "10.0.0.5/24", 1)}, 1, []string{"veth1", "eth0"}},
		{"indexless with pod entry", []*types100.Interface{{Name: "eth0", Sandbox: "/ns"}},
			[]*types100.IPConfig{indexless()}, 0, []string{"eth0"}},
		{"indexless, host entry only", []*types100.Interface{{Name: "cali1234"}},
			[]*types100.IPConfig{indexless()}, 1, []string{"cali1234", "eth0"}},
		{"indexless, no interfaces", nil, []*types100.IPConfig{indexless(), nil}, 0, []string{"eth0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &types100.Result{Interfaces: tc.ifs, IPs: tc.ips}
			if at := ClaimIndexless(r, "eth0", "/ns"); at != tc.wantAt {
				t.Errorf("at = %d, want %d", at, tc.wantAt)
			}
			var names []string
			for _, i := range r.Interfaces {
				names = append(names, i.Name)
			}
			if !slices.Equal(names, tc.wantIfs) || r.Interfaces[tc.wantAt].Sandbox != "/ns" {
				t.Errorf("interfaces %v, want %v with %s in the sandbox", names, tc.wantIfs, tc.wantIfs[tc.wantAt])
			}
			for _, ip := range r.IPs {
				if ip != nil && (ip.Interface == nil || *ip.Interface != tc.wantAt) {
					t.Errorf("IP %s not on interface %d", ip.Address.String(), tc.wantAt)
				}
			}
		})
	}
}

func TestOptionsDefaults(t *testing.T) {
	var o Options
	if o.DAD {
		t.Error("DAD on by default")
	}
	if got := o.dadTimeout(); got != 10*time.Second {
		t.Errorf("default DAD timeout = %v, want 10s", got)
	}
	if got := (Options{DADTimeout: 3 * time.Second}).dadTimeout(); got != 3*time.Second {
		t.Errorf("DAD timeout = %v, want 3s", got)
	}
}

func TestToNetlinkRouteGateway(t *testing.T) {
	ips := []*types100.IPConfig{ipc(t, "10.77.0.2/24", 0), ipc(t, "fd00:77::10/64", 0)}
	ips[0].Gateway = net.ParseIP("10.77.0.1")
	ips[1].Gateway = net.ParseIP("fd00:77::1")
	r6 := toNetlinkRoute(3, route(t, "fd00:78::/64"), ips)
	if r6.LinkIndex != 3 || !r6.Gw.Equal(ips[1].Gateway) {
		t.Errorf("v6 route = %+v", r6)
	}
	explicit := route(t, "10.78.0.0/24")
	explicit.GW = net.ParseIP("10.77.0.9")
	if r := toNetlinkRoute(3, explicit, ips); !r.Gw.Equal(explicit.GW) {
		t.Errorf("explicit gateway replaced: %v", r.Gw)
	}
	if r := toNetlinkRoute(3, route(t, "10.79.0.0/24"), ips[1:]); r.Gw != nil {
		t.Errorf("v4 route took a v6 gateway: %v", r.Gw)
	}
}

func TestHostRouteWarningMissingParent(t *testing.T) {
	msg := HostRouteWarning("no-such-dev0", []*types100.IPConfig{ipc(t, "fd00:77::10/64", 0)})
	if msg == "" {
		t.Error("no warning for a missing parent")
	}
	if HostRouteWarning("no-such-dev0", nil) != "" {
		t.Error("warning without IPs")
	}
}

func TestConfigureNilResult(t *testing.T) {
	if err := Configure(nil, "rdma0", nil, Options{}); err == nil {
		t.Error("Configure(nil result) succeeded")
	}
}
