package chain

import (
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/outcome"
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

func TestLogLine(t *testing.T) {
	w := &world{}
	_ = w.plugin().Add(cmd(t.TempDir(), "", ""))
	line := w.stderr.String()
	for _, want := range []string{"verb=ADD", "container=c1", "pod=default/p1", "outcome=error", "code=7", "duration="} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q lacks %q", line, want)
		}
	}
	if w.stdout.Len() != 0 {
		t.Error("logged to stdout")
	}
}

// TestOutcomeRecorded checks that every verb leaves its outcome in the
// bounded log inspect reads; a failure keeps its code and message.
func TestOutcomeRecorded(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeShared}
	wantCode(t, w.plugin().Add(cmd(dir, `,"podSelection":"all"`, prevResult100)), CodeNoDevice, "")
	entries, err := outcome.Read(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("outcomes %v, %v", entries, err)
	}
	if e := entries[0]; e.Verb != "ADD" || e.Code != CodeNoDevice || e.Pod != "default/p1" || !e.Failed() {
		t.Errorf("outcome %+v", e)
	}
}
