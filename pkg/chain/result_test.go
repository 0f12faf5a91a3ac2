package chain

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/rdma-chain/rdma-chain/internal/testonly/followers"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// prevIndexless is a primary that reports its IP without an interface index
// and only its host-side interface, as Calico does.
const prevIndexless = `{"cniVersion":"1.0.0","interfaces":[{"name":"cali1234"}],
	"ips":[{"address":"10.1.0.5/32"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{}}`

// TestResultAsFollowersReadIt applies CRI-O's and Multus's rules
// (internal/testonly/followers, since their modules cannot be linked here) to
// the final result and checks that by default the pod IPs are the primary's
// only and eth0 is Multus's default with eth0's addresses, behind an indexed
// (ptp) and an index-less (Calico) primary; with reportIPs Multus shows
// rdma0's address on rdma0, never as default, and CRI-O lists it as a pod IP
// (why reportIPs is off by default).
func TestResultAsFollowersReadIt(t *testing.T) {
	eth0 := followers.Status{Interface: "eth0", IPs: []string{"10.1.0.5"}, Default: true}
	rdma0 := followers.Status{Interface: "rdma0", IPs: nil}
	rdma0Reported := followers.Status{Interface: "rdma0", IPs: []string{"fd00:77::5"}}
	cases := []struct {
		name, prev string
		report     bool
		wantPodIPs []string
		wantStatus []followers.Status
	}{
		{"ptp", prevResult100, false, []string{"10.1.0.5"}, []followers.Status{eth0, rdma0}},
		{"calico", prevIndexless, false, []string{"10.1.0.5"}, []followers.Status{eth0, rdma0}},
		{"ptp reportIPs", prevResult100, true, []string{"10.1.0.5", "fd00:77::5"}, []followers.Status{eth0, rdma0Reported}},
		{"calico reportIPs", prevIndexless, true, []string{"10.1.0.5", "fd00:77::5"}, []followers.Status{eth0, rdma0Reported}},
	}
	for _, tc := range cases {
		for _, ver := range []string{"1.0.0", "1.1.0"} {
			t.Run(tc.name+"/"+ver, func(t *testing.T) {
				w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}}
				args := cmd(t.TempDir(), withIPAM+fmt.Sprintf(`,"reportIPs":%v`, tc.report), tc.prev)
				args.StdinData = []byte(strings.ReplaceAll(string(args.StdinData), `"1.0.0"`, `"`+ver+`"`))
				if err := w.plugin().Add(args); err != nil {
					t.Fatal(err)
				}
				res, err := types100.NewResult(w.stdout.Bytes())
				if err != nil {
					t.Fatal(err)
				}
				r, err := types100.GetResult(res)
				if err != nil {
					t.Fatal(err)
				}
				if got := followers.CRIOPodIPs(r); !reflect.DeepEqual(got, tc.wantPodIPs) {
					t.Errorf("CRI-O pod IPs %v, want %v", got, tc.wantPodIPs)
				}
				got := followers.MultusStatuses(r, true)
				for i := range got {
					got[i].MTU = 0
				}
				if !reflect.DeepEqual(got, tc.wantStatus) {
					t.Errorf("Multus network-status %+v, want %+v\nresult %s", got, tc.wantStatus, w.stdout.String())
				}
			})
		}
	}
}

// TestResultHelpersSkipNil checks that null entries in a result never
// crash the plugin's own loops.
func TestResultHelpersSkipNil(t *testing.T) {
	r := mustResult(t, `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x","mac":"02:00:00:00:00:01"}],"ips":[{"address":"10.0.0.1/24"}]}`)
	r.Interfaces = append(r.Interfaces, nil)
	r.IPs = append(r.IPs, nil)
	if len(resultMACs(r)) != 1 || !hasIPv4(r) || !hasInterface(r, "eth0", "/x") || hasInterface(r, "rdma0", "/x") {
		t.Error("helpers wrong over nil entries")
	}
}

func mustResult(t *testing.T, js string) *types100.Result {
	t.Helper()
	r, err := types100.NewResult([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	res, err := types100.GetResult(r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
