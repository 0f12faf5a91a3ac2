package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// deriveConf derives the static pod from conf/daemonset.yaml with set as
// -install-set and returns both, decoded strictly, and the derived YAML.
func deriveConf(t *testing.T, set string) (appsv1.DaemonSet, corev1.Pod, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "conf", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := derive(data, set)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(out, &pod); err != nil {
		t.Fatalf("derived pod: %v\n%s", err, out)
	}
	return ds, pod, out
}

// TestDerive checks that the static pod carries the DaemonSet's pod
// template exactly.
func TestDerive(t *testing.T) {
	ds, pod, out := deriveConf(t, "")
	if pod.Kind != "Pod" || pod.Name != ds.Name || pod.Namespace != ds.Namespace || !reflect.DeepEqual(pod.Labels, ds.Spec.Template.Labels) {
		t.Errorf("pod %s %s/%s labels %v", pod.Kind, pod.Namespace, pod.Name, pod.Labels)
	}
	if !reflect.DeepEqual(pod.Spec, ds.Spec.Template.Spec) {
		t.Errorf("spec differs from the template:\n%s", out)
	}
	if _, err := derive([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n"), ""); err == nil {
		t.Error("a Pod was taken for a DaemonSet")
	}
}

// TestDeriveInstallSet checks that -install-set changes the install and
// reconcile containers' --set value and nothing else.
func TestDeriveInstallSet(t *testing.T) {
	const set = `{"mode":"shared"}`
	ds, pod, out := deriveConf(t, set)
	want := ds.Spec.Template.Spec.DeepCopy()
	replaced := 0
	for _, args := range [][]string{want.InitContainers[0].Args, want.Containers[0].Args} {
		for i := range args[:len(args)-1] {
			if args[i] == "--set" {
				if args[i+1] == set {
					t.Fatalf("the DaemonSet already sets %s", set)
				}
				args[i+1] = set
				replaced++
			}
		}
	}
	if replaced != 2 {
		t.Fatalf("%d --set arguments in install and reconcile, want 2", replaced)
	}
	if !reflect.DeepEqual(&pod.Spec, want) {
		t.Errorf("spec differs beyond --set:\n%s", out)
	}
}
