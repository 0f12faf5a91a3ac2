// Command staticpod derives the node tier's static pod from
// conf/daemonset.yaml mechanically: the DaemonSet's pod template, as it is,
// becomes a Pod in the DaemonSet's namespace (kubelet runs static pods
// without an API server). Nothing of the spec is changed or added.
//
//	staticpod conf/daemonset.yaml > /etc/kubernetes/manifests/rdma-chain.yaml
package main

import (
	"fmt"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: staticpod DAEMONSET.yaml")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err == nil {
		data, err = derive(data)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "staticpod:", err)
		os.Exit(1)
	}
	_, _ = os.Stdout.Write(data)
}

// derive returns the static pod of the DaemonSet manifest ds as YAML.
func derive(ds []byte) ([]byte, error) {
	var d appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(ds, &d); err != nil {
		return nil, err
	}
	if d.Kind != "DaemonSet" {
		return nil, fmt.Errorf("kind %q, want DaemonSet", d.Kind)
	}
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        d.Name,
			Namespace:   d.Namespace,
			Labels:      d.Spec.Template.Labels,
			Annotations: d.Spec.Template.Annotations,
		},
		Spec: d.Spec.Template.Spec,
	}
	return yaml.Marshal(&pod)
}
