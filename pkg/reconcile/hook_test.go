package reconcile

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
)

// hookKernel is the fake node's socket hook: what is held, what HoldHook
// answers, and the calls it saw.
type hookKernel struct {
	held  map[string]bool
	hold  map[string]error // HoldHook's error per directory
	calls []string
}

func (n *fakeNode) HookHeld(dir string) (bool, error) {
	n.hook.calls = append(n.hook.calls, "held "+dir)
	return n.hook.held[dir], nil
}

func (n *fakeNode) HoldHook(dir, mode string) (bool, error) {
	n.hook.calls = append(n.hook.calls, "hold "+dir+" "+mode)
	n.order = append(n.order, "hold "+dir)
	if err := n.hook.hold[dir]; err != nil {
		return false, err
	}
	if n.hook.held == nil {
		n.hook.held = map[string]bool{}
	}
	n.hook.held[dir] = true
	return true, nil
}

func smcNet(t *testing.T, name, smcr string) conflist.Network {
	return conflist.Network{Name: name, DataDir: t.TempDir(),
		Stdin: fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":%q,"type":"rdma-chain"%s}`, name, smcr)}
}

// TestHoldHooks checks that before each pass the daemon holds the hook
// in every directory an entry with smcr.transparent auto or bpf lists
// pods in, once; a kernel that gives the mode another mechanism is said
// once and not asked again; a failed hold is said and tried again.
func TestHoldHooks(t *testing.T) {
	unused := fmt.Errorf("%w: smcr.transparent auto uses tcp2smc (kernel offers smc,tcp2smc)", errHookUnused)
	for _, tc := range []struct {
		name    string
		smcr    []string // one network each
		hold    map[string]error
		calls   []string       // over two rounds
		says    map[string]int // log lines and how often, over two rounds
		silence bool
		unheld  float64 // rdma_chain_smc_socket_hook_unheld after the rounds
	}{
		{name: "auto by default", smcr: []string{""},
			calls: []string{"held /sys/fs/bpf/rdma-chain", "hold /sys/fs/bpf/rdma-chain auto", "held /sys/fs/bpf/rdma-chain"},
			says:  map[string]int{`level=INFO msg="holding the SMC socket hook loaded: SMC-R pods' ADD only list their netns" bpffsDir=/sys/fs/bpf/rdma-chain`: 1}},
		{name: "bpf wins over auto in one dir", smcr: []string{`,"smcr":{"transparent":"auto"}`, `,"smcr":{"transparent":"bpf"}`},
			calls: []string{"held /sys/fs/bpf/rdma-chain", "hold /sys/fs/bpf/rdma-chain bpf", "held /sys/fs/bpf/rdma-chain"}},
		{name: "two dirs", smcr: []string{`,"smcr":{"bpffsDir":"/sys/fs/bpf/a"}`, `,"smcr":{"transparent":"bpf","bpffsDir":"/sys/fs/bpf/b"}`},
			calls: []string{"held /sys/fs/bpf/a", "hold /sys/fs/bpf/a auto", "held /sys/fs/bpf/b", "hold /sys/fs/bpf/b bpf", "held /sys/fs/bpf/a", "held /sys/fs/bpf/b"}},
		{name: "off and tcp2smc never hold", smcr: []string{`,"smcr":{"transparent":"off"}`, `,"smcr":{"transparent":"tcp2smc"}`}, silence: true},
		{name: "SMC-R off on the network", smcr: []string{`,"smcr":{"enabled":false}`}, silence: true},
		{name: "a draining entry", smcr: []string{`,"drain":true`}, silence: true},
		{name: "SMC-R for some namespaces", smcr: []string{`,"smcr":{"namespaces":["ml"]}`},
			calls: []string{"held /sys/fs/bpf/rdma-chain", "hold /sys/fs/bpf/rdma-chain auto", "held /sys/fs/bpf/rdma-chain"}},
		{name: "an entry that does not parse", smcr: []string{`,"smcr":{"transparent":"sometimes"}`}, silence: true},
		{name: "kernel uses another mechanism", smcr: []string{""}, hold: map[string]error{"/sys/fs/bpf/rdma-chain": unused},
			calls: []string{"held /sys/fs/bpf/rdma-chain", "hold /sys/fs/bpf/rdma-chain auto"},
			says:  map[string]int{`level=INFO msg="SMC socket hook not held" bpffsDir=/sys/fs/bpf/rdma-chain why="not the mechanism of this node: smcr.transparent auto uses tcp2smc`: 1}},
		{name: "a failed hold is tried again", smcr: []string{""}, hold: map[string]error{"/sys/fs/bpf/rdma-chain": errors.New("load: permission denied")},
			calls:  []string{"held /sys/fs/bpf/rdma-chain", "hold /sys/fs/bpf/rdma-chain auto", "held /sys/fs/bpf/rdma-chain", "hold /sys/fs/bpf/rdma-chain auto"},
			says:   map[string]int{`level=ERROR msg="cannot hold the SMC socket hook" bpffsDir=/sys/fs/bpf/rdma-chain error="load: permission denied"`: 2},
			unheld: 1},
		{name: "one of two dirs fails", smcr: []string{`,"smcr":{"bpffsDir":"/sys/fs/bpf/a"}`, `,"smcr":{"bpffsDir":"/sys/fs/bpf/b"}`},
			hold:  map[string]error{"/sys/fs/bpf/b": errors.New("load: permission denied")},
			calls: []string{"held /sys/fs/bpf/a", "hold /sys/fs/bpf/a auto", "held /sys/fs/bpf/b", "hold /sys/fs/bpf/b auto", "held /sys/fs/bpf/a", "held /sys/fs/bpf/b", "hold /sys/fs/bpf/b auto"},
			says:  map[string]int{`level=ERROR msg="cannot hold the SMC socket hook" bpffsDir=/sys/fs/bpf/b error="load: permission denied"`: 2}, unheld: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newFakeNode(t)
			n.hook.hold = tc.hold
			r := n.reconciler("")
			r.nets = nil
			for i, s := range tc.smcr {
				r.nets = append(r.nets, smcNet(t, fmt.Sprintf("net%d", i), s))
			}
			r.holdHooks()
			r.holdHooks()
			// Map order: compare the calls of each directory in order.
			if got := byDir(n.hook.calls); !reflect.DeepEqual(got, byDir(tc.calls)) {
				t.Errorf("calls = %q, want %q", n.hook.calls, tc.calls)
			}
			out := n.out.String()
			for want, times := range tc.says {
				if got := strings.Count(out, want); got != times {
					t.Errorf("log says %q %d times, want %d:\n%s", want, got, times, out)
				}
			}
			if tc.silence && out != "" {
				t.Errorf("log: %s, want nothing", out)
			}
			if got := testutil.ToFloat64(r.metrics.HookUnheld); got != tc.unheld {
				t.Errorf("rdma_chain_smc_socket_hook_unheld = %v, want %v", got, tc.unheld)
			}
		})
	}
}

func byDir(calls []string) map[string][]string {
	out := map[string][]string{}
	for _, c := range calls {
		dir := strings.Fields(c)[1]
		out[dir] = append(out[dir], c)
	}
	return out
}
