//go:build cluster

package cluster

import (
	"slices"
	"strings"
	"testing"
)

func TestParseWorkloads(t *testing.T) {
	pod := func(ann string) string {
		return `{"kind":"Pod","metadata":{"name":"p","annotations":{` + ann + `}}}`
	}
	tmpl := func(kind, spec, ann string) string {
		return `{"kind":"` + kind + `","metadata":{"name":"w","namespace":"ns"},"spec":{` + spec +
			`"template":{"metadata":{"annotations":{` + ann + `}}}}}`
	}
	for _, tc := range []struct {
		name, in string
		want     []workload
		err      string
	}{
		{"bare pod in default", pod(`"test.rdma-chain/expect":"none"`),
			[]workload{{kind: "Pod", namespace: "default", name: "p", pods: 1, expect: "none"}}, ""},
		{"deployment's replicas and span", tmpl("Deployment", `"replicas":3,`, `"test.rdma-chain/expect":"rdma0","test.rdma-chain/nodes":"2"`),
			[]workload{{kind: "Deployment", namespace: "ns", name: "w", pods: 3, expect: "rdma0", nodes: 2}}, ""},
		{"statefulset default replicas", tmpl("StatefulSet", "", `"test.rdma-chain/expect":"none"`),
			[]workload{{kind: "StatefulSet", namespace: "ns", name: "w", pods: 1, expect: "none"}}, ""},
		{"job: parallelism capped by completions", tmpl("Job", `"parallelism":4,"completions":2,`, `"test.rdma-chain/expect":"rdma0"`),
			[]workload{{kind: "Job", namespace: "ns", name: "w", pods: 2, expect: "rdma0"}}, ""},
		{"list with a claim template", `{"kind":"List","items":[{"kind":"ResourceClaimTemplate","metadata":{"name":"c"}},` +
			pod(`"test.rdma-chain/expect":"pending","test.rdma-chain/reason":"Insufficient"`) + `]}`,
			[]workload{{kind: "Pod", namespace: "default", name: "p", pods: 1, expect: "pending", reason: "Insufficient"}}, ""},
		{"objects one after the other", pod(`"test.rdma-chain/expect":"none"`) + "\n" + tmpl("Job", "", `"test.rdma-chain/expect":"rdma0"`),
			[]workload{{kind: "Pod", namespace: "default", name: "p", pods: 1, expect: "none"},
				{kind: "Job", namespace: "ns", name: "w", pods: 1, expect: "rdma0"}}, ""},
		{"no objects", "", nil, ""},
		{"no expectation", pod(`"other":"x"`), nil, "no annotation test.rdma-chain/expect"},
		{"node tier's expectation", pod(`"test.rdma-chain/expect":"waits"`), nil, "node tier's"},
		{"unknown key", pod(`"test.rdma-chain/expect":"none","test.rdma-chain/rping":"server"`), nil, "not the cluster tier's"},
		{"more nodes than the cluster", tmpl("Deployment", `"replicas":3,`, `"test.rdma-chain/expect":"rdma0","test.rdma-chain/nodes":"3"`), nil, "from 1 to 2"},
		{"more nodes than pods", tmpl("Deployment", `"replicas":1,`, `"test.rdma-chain/expect":"rdma0","test.rdma-chain/nodes":"2"`), nil, "makes 1 pods"},
		{"span of a pending pod", pod(`"test.rdma-chain/expect":"pending","test.rdma-chain/nodes":"1"`), nil, "a pending pod is on no node"},
		{"reason without pending", pod(`"test.rdma-chain/expect":"rdma0","test.rdma-chain/reason":"x"`), nil, "for pods that expect pending"},
		{"daemonset", tmpl("DaemonSet", "", `"test.rdma-chain/expect":"rdma0"`), nil, "not one the tier runs"},
		{"not json", `kind: Pod`, nil, "kubectl's objects"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseWorkloads([]byte(tc.in), 2)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("workload %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestWorkloadOwns(t *testing.T) {
	yes := true
	pod := func(ns, name, kind, owner string) *podItem {
		p := &podItem{}
		p.Metadata.Namespace, p.Metadata.Name = ns, name
		if kind != "" {
			p.Metadata.OwnerReferences = []ownerRef{{Kind: kind, Name: owner, Controller: &yes}}
		}
		return p
	}
	dep := workload{kind: "Deployment", namespace: "default", name: "trainer"}
	job := workload{kind: "Job", namespace: "default", name: "dra-workers"}
	bare := workload{kind: "Pod", namespace: "default", name: "p"}
	for _, tc := range []struct {
		name string
		w    workload
		p    *podItem
		want bool
	}{
		{"deployment's replicaset", dep, pod("default", "trainer-5d9c-x", "ReplicaSet", "trainer-5d9c8f7b6"), true},
		{"another deployment's with a longer name", dep, pod("default", "trainer-b-1", "ReplicaSet", "trainer-b-6c7d8"), false},
		{"other namespace", dep, pod("other", "trainer-5d9c-x", "ReplicaSet", "trainer-5d9c8f7b6"), false},
		{"job", job, pod("default", "dra-workers-0-abc", "Job", "dra-workers"), true},
		{"statefulset of the job's name", job, pod("default", "dra-workers-0", "StatefulSet", "dra-workers"), false},
		{"bare pod", bare, pod("default", "p", "", ""), true},
		{"a controlled pod of the bare pod's name", bare, pod("default", "p", "Job", "j"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.w.owns(tc.p); got != tc.want {
				t.Errorf("owns = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSections(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"a\n@@\nb\n", []string{"a\n", "b\n\n"}},
		{"a\n@@\n@@\nb", []string{"a\n", "", "b\n"}},
		{"@@", []string{"", ""}},
	} {
		if got := sections(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("sections(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
