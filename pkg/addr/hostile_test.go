package addr

import (
	"context"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// TestAddHostileResult feeds Add IPAM answers with null entries and
// out-of-range interface indexes at every result version. Null entries made
// the CNI library's 0.3.x/0.4.0 conversion panic; they are now an error that
// also releases the lease. Interface indexes are the IPAM's business only:
// ReportIPs repoints them.
func TestAddHostileResult(t *testing.T) {
	bodies := []struct {
		name, body string
		wantErr    string // "" = accepted
	}{
		{"null ip", `"ips":[null]`, `null entry in "ips"`},
		{"null ip after a good one", `"ips":[{"address":"10.0.0.1/24"},null]`, `null entry in "ips"`},
		{"null interface", `"interfaces":[null],"ips":[{"address":"10.0.0.1/24","interface":0}]`, `null entry in "interfaces"`},
		{"null route", `"ips":[{"address":"10.0.0.1/24"}],"routes":[null]`, `null entry in "routes"`},
		{"interface index past the end", `"ips":[{"address":"10.0.0.1/24","interface":5}]`, ""},
		{"negative interface index", `"ips":[{"address":"10.0.0.1/24","interface":-1}]`, ""},
	}
	for _, ver := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		for _, b := range bodies {
			t.Run(ver+"/"+b.name, func(t *testing.T) {
				conf := strings.Replace(testConf, `"cniVersion":"1.1.0","name"`, `"cniVersion":"`+ver+`","name"`, 1)
				f := &fakeExec{replies: map[string]string{"ADD": `{"cniVersion":"` + ver + `",` + b.body + `}`}}
				r := testRequest()
				r.NetConf = []byte(conf)
				res, err := (&execIPAM{exec: f}).Add(context.Background(), r)
				if b.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), b.wantErr) || !strings.Contains(err.Error(), "rdma0") {
						t.Fatalf("Add = %v, %v; want an error naming rdma0 and %s", res, err, b.wantErr)
					}
					if cmds := f.commands(); len(cmds) != 2 || cmds[1] != "DEL" {
						t.Errorf("calls %v: an unusable answer must release the lease", cmds)
					}
					return
				}
				if err != nil || res == nil || len(res.IPs) != 1 {
					t.Fatalf("Add = %+v, %v", res, err)
				}
				dst := &types100.Result{Interfaces: []*types100.Interface{{Name: "eth0"}, {Name: "rdma0"}}}
				ReportIPs(dst, res, 1)
				if len(dst.IPs) != 1 || dst.IPs[0].Interface == nil || *dst.IPs[0].Interface != 1 {
					t.Errorf("merged IPs %+v: want one IP on interface 1", dst.IPs)
				}
			})
		}
	}
}

// TestReportIPsHostile merges 1.0.0 results as an in-process IPAM could
// hand them over (nil entries, nil interface pointers, odd indexes, a route
// without destination): nil entries are skipped, every merged IP points at
// ifIndex, a route without destination counts as a default route and is
// left out, nothing panics.
func TestReportIPsHostile(t *testing.T) {
	bad := -7
	tests := []struct {
		name             string
		res              *types100.Result
		wantIPs, wantRts int
	}{
		{"nil lists", &types100.Result{}, 0, 0},
		{"only nil entries", &types100.Result{IPs: []*types100.IPConfig{nil, nil}, Routes: []*types.Route{nil}}, 0, 0},
		{"nil interface pointer", &types100.Result{IPs: []*types100.IPConfig{{}}}, 1, 0},
		{"index out of range", &types100.Result{IPs: []*types100.IPConfig{{Interface: &bad}, nil}, Routes: []*types.Route{nil, {}}}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := &types100.Result{IPs: []*types100.IPConfig{nil}}
			ReportIPs(dst, tt.res, 3)
			if len(dst.IPs) != 1+tt.wantIPs || len(dst.Routes) != tt.wantRts {
				t.Fatalf("merged %d IPs, %d routes; want %d, %d", len(dst.IPs)-1, len(dst.Routes), tt.wantIPs, tt.wantRts)
			}
			for _, ip := range dst.IPs[1:] {
				if ip.Interface == nil || *ip.Interface != 3 {
					t.Errorf("merged IP %+v does not point at interface 3", ip)
				}
			}
		})
	}
}
