//go:build cluster

package cluster

import (
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestAddFigures(t *testing.T) {
	line := func(msg, d, outcome string) string {
		return `time=2026-12-02T10:00:00Z level=INFO msg=` + msg + ` plugin=rdma-chain verb=ADD container=c pod=default/burst-plain-1 ifname=eth0 duration=` + d + ` outcome=` + outcome
	}
	var hundred []string
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, line("done", strconv.Itoa(i)+"ms", "ok"))
	}
	for _, tc := range []struct {
		name, log, want string
	}{
		{"none", "", "no closing ADD lines"},
		{"one", line("done", "850.5ms", "ok"), "p50 851ms p99 851ms max 851ms (1 calls, 0 failed)"},
		{"a failure counts", line("done", "1s", "ok") + "\n" + line("failed", "30.2s", "error"),
			"p50 1s p99 30.2s max 30.2s (2 calls, 1 failed)"},
		{"hundred", strings.Join(hundred, "\n"), "p50 50ms p99 99ms max 100ms (100 calls, 0 failed)"},
		{"no duration", "msg=done verb=ADD outcome=ok", "no closing ADD lines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := addFigures(tc.log); got != tc.want {
				t.Errorf("addFigures = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBurstManifest(t *testing.T) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec struct {
				NodeSelector map[string]string `json:"nodeSelector"`
				Containers   []struct {
					Resources struct {
						Limits map[string]string `json:"limits"`
					} `json:"resources"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := yaml.Unmarshal([]byte(burstManifest("b", "node-b", 3, 2)), &list); err != nil {
		t.Fatal(err)
	}
	rdma := 0
	for _, p := range list.Items {
		if p.Metadata.Labels["app"] != "b" || p.Spec.NodeSelector["kubernetes.io/hostname"] != "node-b" || len(p.Spec.Containers) != 1 {
			t.Errorf("pod %s: labels %v, nodeSelector %v", p.Metadata.Name, p.Metadata.Labels, p.Spec.NodeSelector)
		}
		if p.Spec.Containers[0].Resources.Limits["rdma/hca"] == "1" {
			rdma++
		}
	}
	if len(list.Items) != 5 || rdma != 2 {
		t.Errorf("%d pods, %d with rdma/hca: want 5 and 2", len(list.Items), rdma)
	}
}
