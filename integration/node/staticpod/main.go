// Command staticpod derives the node tier's static pod from
// conf/daemonset.yaml mechanically: the DaemonSet's pod template, as it is,
// becomes a Pod in the DaemonSet's namespace (kubelet runs static pods
// without an API server). Nothing of the spec is changed or added, except
// with -install-set: the value after --set in the install and reconcile
// containers' arguments, the entry both write (an overlay's --set: a
// Lingjun node's mode, ipam and podIPv6Block).
//
//	staticpod [-install-set JSON] conf/daemonset.yaml > /etc/kubernetes/manifests/rdma-chain.yaml
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	set := flag.String("install-set", "", "JSON for the containers' --set (default: the DaemonSet's)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: staticpod [-install-set JSON] DAEMONSET.yaml")
		os.Exit(2)
	}
	data, err := os.ReadFile(flag.Arg(0))
	if err == nil {
		data, err = derive(data, *set)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "staticpod:", err)
		os.Exit(1)
	}
	_, _ = os.Stdout.Write(data)
}

// derive returns the static pod of the DaemonSet manifest ds as YAML, with
// set (if not empty) as the install and reconcile containers' --set value.
func derive(ds []byte, set string) ([]byte, error) {
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
	if set != "" {
		if err := setInstall(&pod.Spec, set); err != nil {
			return nil, err
		}
	}
	return yaml.Marshal(&pod)
}

// setInstall replaces the value after --set in the install init container's
// and the reconcile container's arguments: both write the same entry.
func setInstall(spec *corev1.PodSpec, set string) error {
	for _, c := range []*corev1.Container{container(spec.InitContainers, "install"), container(spec.Containers, "reconcile")} {
		if c == nil || !replaceSet(c.Args, set) {
			return errors.New("no --set in the arguments of containers install and reconcile")
		}
	}
	return nil
}

func container(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// replaceSet puts set after the --set in args and reports whether there is one.
func replaceSet(args []string, set string) bool {
	for j := 0; j+1 < len(args); j++ {
		if args[j] == "--set" {
			args[j+1] = set
			return true
		}
	}
	return false
}
