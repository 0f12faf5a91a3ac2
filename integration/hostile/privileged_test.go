package hostile

import (
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestHostilePrivileged runs the whole corpus with the plugin in a fresh
// node netns per case and a real pod netns; the node netns must not change.
func TestHostilePrivileged(t *testing.T) {
	testenv.Privileged(t)
	corpus := loadCorpus(t)
	for _, name := range sortedNames(corpus) {
		c := corpus[name]
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			node, pod := netnstest.NewNS(t), netnstest.NewNS(t)
			netnstest.AddVeth(t, node, pod, "ens9", 1400, "192.0.2.10/24", "fd00:1::10/64")
			netnstest.AddRoute(t, node, "ens9", "198.51.100.0/24", "192.0.2.1", 0, 0)
			w.podNS, w.nodeNS = pod.Path(), node.Path()
			w.inNode = func(fn func() error) error {
				return node.Do(func(ns.NetNS) error { return fn() })
			}
			w.hostState = func() (any, error) {
				var s any
				err := node.Do(func(ns.NetNS) (err error) { s, err = netnsState(); return err })
				return s, err
			}
			runCase(t, w, c)
		})
	}
}
