package deploy

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestCRIO checks that, with the crio component, reconcile asks CRI-O's
// socket (CRI_SOCKET, which --cri-socket names, under /run/crio mounted at
// its host path) and nothing else of the overlay changes.
func TestCRIO(t *testing.T) {
	for _, o := range overlays {
		t.Run(o.dir, func(t *testing.T) {
			mem := treeFS(t)
			plain := render(t, mem, "/deploy/"+o.dir)
			r := userKustomization(t, mem, "resources: [../deploy/"+o.dir+"]\ncomponents: [../deploy/crio]\n")
			checkPodOn(t, r.ds.Spec.Template.Spec, o, crio)
			checkNodes(t, r.ds.Spec.Template.Spec.Affinity, o.nodeLabel)
			if len(r.objects) != 1 {
				t.Errorf("objects of kinds %v, want the DaemonSet only", slices.Collect(maps.Keys(r.objects)))
			}
			// Undo what the component did: the rest equals the overlay.
			got := r.ds.DeepCopy()
			s := &got.Spec.Template.Spec
			setRuntime(s, containerd)
			want := plain.ds.DeepCopy()
			sortByName(s)
			sortByName(&want.Spec.Template.Spec)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the component changed more than the CRI socket, its mount and volume:\n%+v\nwant\n%+v", got.Spec.Template.Spec, want.Spec.Template.Spec)
			}
		})
	}
}

// TestCRIOWithMonitoring checks that the crio and monitoring components
// compose, in either order.
func TestCRIOWithMonitoring(t *testing.T) {
	for _, components := range []string{"[../deploy/crio, ../deploy/monitoring]", "[../deploy/monitoring, ../deploy/crio]"} {
		t.Run(components, func(t *testing.T) {
			r := userKustomization(t, treeFS(t), "resources: [../deploy/overlays/generic]\ncomponents: "+components+"\n")
			c := r.ds.Spec.Template.Spec.Containers[0]
			checkProbe(t, c, "")
			checkArgs(t, c, "reconcile", flagArgs(t, c.Args, "--ensure-entry"))
			if got := envValue(c, "CRI_SOCKET"); got != crio.socket {
				t.Errorf("CRI_SOCKET %q, want %q", got, crio.socket)
			}
			// The kubelet expands $(NODE_IP) only from a variable defined before.
			nodeIP := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_IP" })
			bind := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "METRICS_BIND_ADDRESS" })
			if nodeIP < 0 || bind < nodeIP {
				t.Errorf("env %+v: NODE_IP must come before METRICS_BIND_ADDRESS", c.Env)
			}
			checkVolumes(t, r.ds.Spec.Template.Spec.Volumes, crio)
		})
	}
}

// setRuntime points s's reconcile container at rt's socket, mount and
// volume.
func setRuntime(s *corev1.PodSpec, rt runtime) {
	c := &s.Containers[0]
	for i := range c.Env {
		if c.Env[i].Name == "CRI_SOCKET" {
			c.Env[i].Value = rt.socket
		}
	}
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == "cri-socket-dir" {
			c.VolumeMounts[i].MountPath = rt.dir
		}
	}
	for i := range s.Volumes {
		if s.Volumes[i].Name == "cri-socket-dir" && s.Volumes[i].HostPath != nil {
			s.Volumes[i].HostPath.Path = rt.dir
		}
	}
}

// sortByName orders the volumes and the reconcile container's env and
// mounts by name: a strategic merge puts the items it patched first.
func sortByName(s *corev1.PodSpec) {
	c := &s.Containers[0]
	slices.SortFunc(c.VolumeMounts, func(a, b corev1.VolumeMount) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(c.Env, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.Volumes, func(a, b corev1.Volume) int { return strings.Compare(a.Name, b.Name) })
}
