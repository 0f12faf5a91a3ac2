package chain

import (
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// TestLogLinesCarryTheCall checks that every line a call logs carries the
// call's verb, container and pod once, bound by the call's logger,
// whatever step logged it.
func TestLogLinesCarryTheCall(t *testing.T) {
	for _, c := range []struct {
		name  string
		world func() *world
		conf  string
		verbs []string
	}{
		{"shared attach and DEL", func() *world {
			return &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")},
				allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"rxe0"}}}}
		}, "", []string{"ADD", "DEL"}},
		{"draining pass-through", func() *world { return &world{} }, `,"drain":true`, []string{"ADD", "DEL"}},
		{"warnings: SMC-R refused, an unknown key", func() *world {
			return &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")},
				allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"rxe0"}}}}
		}, `,"smcr":{"namespaces":["other"]},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}},"unknownKey":1`, []string{"ADD"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := c.world()
			p, dir := w.plugin(), t.TempDir()
			for _, verb := range c.verbs {
				w.stderr.Reset()
				prev := prevResult100
				run := p.Add
				if verb == "DEL" {
					prev, run = "", p.Del
				}
				if err := run(cmd(dir, c.conf, prev)); err != nil {
					t.Fatalf("%s: %v", verb, err)
				}
				lines := strings.Split(strings.TrimSpace(w.stderr.String()), "\n")
				if verb == "ADD" && len(lines) < 2 {
					t.Fatalf("ADD logged %d lines, want its steps' and the closing one: %q", len(lines), lines)
				}
				for _, l := range lines {
					for _, kv := range []string{" verb=" + verb + " ", " container=c1 ", " pod=default/p1 "} {
						if n := strings.Count(l+" ", kv); n != 1 {
							t.Errorf("%s line has %q %d times, want once: %s", verb, strings.TrimSpace(kv), n, l)
						}
					}
				}
			}
		})
	}
}
