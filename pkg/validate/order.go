package validate

import (
	"fmt"
	"strings"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
)

// followerReads says, for the plugins known to run after rdma-chain, what
// they read of the result it passes on (docs/chaining.md has the evidence).
var followerReads = map[string]string{
	"cilium-cni": "reads the pod's links, not the result: Terway's chaining takes the pod's first veth (datapath v2) or first ipvlan link, eth0 (created before rdma0), and passes the result on unchanged",
	"portmap":    "reads the entry of CNI_IFNAME (eth0) and its IPs",
	"bandwidth":  "reads the entry of CNI_IFNAME (eth0)",
	"tuning":     "reads the entry of CNI_IFNAME (eth0)",
	"sbr":        "reads the entry of CNI_IFNAME (eth0) and its IPs",
	"firewall":   "adds FORWARD accepts for every IP of the result (rdma0's too only with reportIPs)",
}

// OrderNotes says what validate sees about the plugins' order when plugins
// follow rdma-chain: who creates the pod interface before it and what each
// follower reads of its result. A conflist without followers, or that
// validate cannot read, gets no note (its problems say enough).
func OrderNotes(data []byte) []string {
	top, err := conflist.Parse(data)
	if err != nil {
		return nil
	}
	plugins, _ := top.Get("plugins")
	if plugins == nil || plugins.Kind != '[' {
		return nil
	}
	var types []string
	at := -1
	for _, p := range plugins.Elems {
		t, _ := p.Get("type")
		if t == nil || !t.IsStr {
			return nil
		}
		if t.Str == conflist.PluginType && at < 0 {
			at = len(types)
		}
		types = append(types, t.Str)
	}
	if at < 0 || at == len(types)-1 {
		return nil
	}
	notes := []string{fmt.Sprintf("order %s: the plugins after rdma-chain receive its result, the previous plugins' with the RDMA interface entries appended (their addresses only with reportIPs)",
		strings.Join(types, " -> "))}
	for _, t := range types[at+1:] {
		reads, ok := followerReads[t]
		if !ok {
			reads = "reads rdma-chain's result (unknown to validate: check it does not take the last interface for the pod's)"
		}
		notes = append(notes, t+": "+reads)
	}
	return notes
}
