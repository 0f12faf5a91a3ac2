package deploy

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// userKustomization writes a kustomization of a user's own at /user into
// mem, beside /deploy, and renders it.
func userKustomization(t *testing.T, mem filesys.FileSystem, body string) rendered {
	t.Helper()
	if err := mem.WriteFile("/user/kustomization.yaml", []byte(body)); err != nil {
		t.Fatal(err)
	}
	return render(t, mem, "/user")
}

// TestImageByDigest checks that a user's images entry for
// localhost/rdma-chain puts the pushed index's digest into both containers
// of every overlay.
func TestImageByDigest(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, o := range overlays {
		t.Run(o.dir, func(t *testing.T) {
			r := userKustomization(t, treeFS(t), "resources: [../deploy/"+o.dir+"]\n"+
				"images:\n- name: localhost/rdma-chain\n  newName: registry.example.com/rdma/rdma-chain\n  digest: "+digest+"\n")
			s := r.ds.Spec.Template.Spec
			for _, c := range append(s.InitContainers, s.Containers...) {
				if c.Image != "registry.example.com/rdma/rdma-chain@"+digest {
					t.Errorf("%s: image %q", c.Name, c.Image)
				}
			}
		})
	}
}

// TestMonitoring checks that, with the monitoring component, reconcile
// binds the node's address (NODE_IP is defined before the variable that
// refers to it, as the kubelet's expansion needs), the probe asks there,
// the port is named for the PodMonitor, whose selector picks the
// DaemonSet's pods in its namespace; the PrometheusRule is there, in that
// namespace; nothing else of the overlay changes.
func TestMonitoring(t *testing.T) {
	for _, o := range overlays {
		t.Run(o.dir, func(t *testing.T) {
			mem := treeFS(t)
			plain := render(t, mem, "/deploy/"+o.dir)
			r := userKustomization(t, mem, "resources: [../deploy/"+o.dir+"]\ncomponents: [../deploy/monitoring]\n")
			c := r.ds.Spec.Template.Spec.Containers[0]
			if len(c.Env) != 4 || c.Env[0].Name != "NODE_IP" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef == nil ||
				c.Env[0].ValueFrom.FieldRef.FieldPath != "status.hostIP" {
				t.Fatalf("env %+v", c.Env)
			}
			checkProbe(t, c, "")
			if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != metricsPort {
				t.Errorf("ports %+v", c.Ports)
			}
			// Undo what the component did: the rest equals the overlay.
			got := r.ds.DeepCopy()
			gc := &got.Spec.Template.Spec.Containers[0]
			gc.Env, gc.Ports, gc.LivenessProbe = plain.ds.Spec.Template.Spec.Containers[0].Env, nil, plain.ds.Spec.Template.Spec.Containers[0].LivenessProbe
			if !reflect.DeepEqual(got, &plain.ds) {
				t.Errorf("the component changed more than the metrics address, probe and port")
			}
			if prs := r.objects["PrometheusRule"]; len(prs) != 1 || prs[0]["metadata"].(map[string]any)["namespace"] != r.ds.Namespace {
				t.Errorf("PrometheusRules %v, want one in %s", prs, r.ds.Namespace)
			}
			pms := r.objects["PodMonitor"]
			if len(pms) != 1 {
				t.Fatalf("%d PodMonitors", len(pms))
			}
			var pm struct {
				Metadata struct{ Namespace string }
				Spec     struct {
					Selector            struct{ MatchLabels map[string]string }
					NamespaceSelector   struct{ MatchNames []string }
					PodMetricsEndpoints []struct{ Port, Path string }
				}
			}
			data, _ := yaml.Marshal(pms[0])
			if err := yaml.Unmarshal(data, &pm); err != nil {
				t.Fatal(err)
			}
			labels := r.ds.Spec.Template.Labels
			for k, v := range pm.Spec.Selector.MatchLabels {
				if labels[k] != v {
					t.Errorf("PodMonitor selects %s=%s, the pods carry %v", k, v, labels)
				}
			}
			if len(pm.Spec.Selector.MatchLabels) == 0 || pm.Metadata.Namespace != r.ds.Namespace ||
				len(pm.Spec.NamespaceSelector.MatchNames) != 1 || pm.Spec.NamespaceSelector.MatchNames[0] != r.ds.Namespace ||
				len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port != "metrics" || pm.Spec.PodMetricsEndpoints[0].Path != "/metrics" {
				t.Errorf("PodMonitor %+v", pm)
			}
		})
	}
}

var (
	opsOnce sync.Once
	opsBin  string
	opsErr  error
)

// opsBinary builds this tree's rdma-chain-ops once.
func opsBinary(t *testing.T) string {
	t.Helper()
	opsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deploy-ops-")
		if err != nil {
			opsErr = err
			return
		}
		opsBin = filepath.Join(dir, "rdma-chain-ops")
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = "/usr/local/go/bin/go"
		}
		cmd := exec.Command(gobin, "build", "-trimpath", "-o", opsBin, "./cmd/rdma-chain-ops")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			opsErr = err
			opsBin = string(out)
		}
	})
	if opsErr != nil {
		t.Fatalf("go build rdma-chain-ops: %v\n%s", opsErr, opsBin)
	}
	return opsBin
}

// TestEntryInstalls checks that each overlay's entry (its --after and
// --set), put by this tree's installer into a conflist as the platform's
// primary writes it, passes validate: the keys and values are ones the
// plugin accepts.
func TestEntryInstalls(t *testing.T) {
	ops := opsBinary(t)
	mem := treeFS(t)
	for _, o := range overlays {
		t.Run(o.dir, func(t *testing.T) {
			args := flagArgs(t, render(t, mem, "/deploy/"+o.dir).ds.Spec.Template.Spec.InitContainers[0].Args)
			conflist := filepath.Join(t.TempDir(), "10-primary.conflist")
			if err := os.WriteFile(conflist, []byte(o.primary), 0o644); err != nil {
				t.Fatal(err)
			}
			install := []string{"install", "--conflist", conflist, "--set", args["--set"]}
			if a := args["--after"]; a != "" {
				install = append(install, "--after", a)
			}
			for _, cmd := range [][]string{install, {"validate", conflist}} {
				out, err := exec.Command(ops, cmd...).CombinedOutput()
				if err != nil {
					t.Fatalf("rdma-chain-ops %q: %v\n%s", cmd, err, out)
				}
			}
			data, _ := os.ReadFile(conflist)
			if !bytes.Contains(data, []byte(`"type": "rdma-chain"`)) && !bytes.Contains(data, []byte(`"type":"rdma-chain"`)) {
				t.Errorf("no rdma-chain entry:\n%s", data)
			}
		})
	}
}

var updateConf = flag.Bool("update-conf", false, "rewrite ../conf/daemonset.yaml from the rendered base")

const confHeader = `# Generated from deploy/base (kustomize): do not edit; edit deploy/base and
# run: cd deploy && go test -run TestConfDaemonSet -update-conf
# The node tier (integration/node/staticpod) runs this pod template as a
# static pod. Clusters apply an overlay: kubectl apply -k deploy/overlays/...
`

// TestConfDaemonSet checks that conf/daemonset.yaml, from which the node
// tier derives its static pod, is the rendered base.
func TestConfDaemonSet(t *testing.T) {
	r := render(t, treeFS(t), "/deploy/base")
	path := filepath.Join("..", "conf", "daemonset.yaml")
	if *updateConf {
		data := r.dsYAML
		if err := os.WriteFile(path, append([]byte(confHeader), data...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if !reflect.DeepEqual(ds, r.ds) {
		t.Errorf("%s differs from the rendered deploy/base: run go test -run TestConfDaemonSet -update-conf", path)
	}
}
