package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/install"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
	"github.com/rdma-chain/rdma-chain/pkg/validate"
)

func confDir() string { return filepath.Join(testenv.RepoRoot(), "conf") }

// TestExampleConflists checks that every example conflist passes
// validate.
func TestExampleConflists(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(confDir(), "*.conflist"))
	if err != nil || len(files) < 5 {
		t.Fatalf("example conflists: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			code, out, errOut := run("validate", f)
			if code != ExitOK {
				t.Errorf("validate: code %d\n%s%s", code, out, errOut)
			}
		})
	}
}

// TestTerwayConfigMap checks that the conflist embedded in the
// eni-config example passes validate too, and so does the file
// terway-cli makes of it with datapath v2 (cilium-cni appended last),
// with a note on the order.
func TestTerwayConfigMap(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(confDir(), "terway-eni-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := bytes.Cut(data, []byte("10-terway.conflist: |\n"))
	if !ok {
		t.Fatal("no 10-terway.conflist key")
	}
	if probs := validate.Conflist(block, ""); len(probs) != 0 {
		t.Errorf("problems: %v", probs)
	}
	var list map[string]any
	if err := json.Unmarshal(block, &list); err != nil {
		t.Fatal(err)
	}
	list["plugins"] = append(list["plugins"].([]any), map[string]any{"type": "cilium-cni", "data-path": "datapathv2"})
	node, _ := json.Marshal(list)
	if probs := validate.Conflist(node, ""); len(probs) != 0 {
		t.Errorf("the node's conflist: problems %v", probs)
	}
	if notes := validate.OrderNotes(node); len(notes) != 2 || !strings.Contains(notes[0], "terway -> rdma-chain -> cilium-cni") {
		t.Errorf("the node's conflist: notes %q", notes)
	}
}

// readManifest decodes conf/daemonset.yaml strictly into the Kubernetes
// API's own DaemonSet type: a field kubectl would reject (misspelled,
// misplaced, wrong type) fails here too.
func readManifest(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(confDir(), "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		t.Fatalf("daemonset.yaml: %v", err)
	}
	if ds.APIVersion != "apps/v1" || ds.Kind != "DaemonSet" {
		t.Fatalf("%s %s", ds.APIVersion, ds.Kind)
	}
	return &ds
}

// TestDaemonSetImage checks that both containers run the image make
// image builds (the Makefile's IMAGE:IMAGE_TAG), and only binaries that
// image holds.
func TestDaemonSetImage(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, l := range strings.Split(string(mk), "\n") {
		if k, v, ok := strings.Cut(l, "?="); ok {
			vars[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	want := vars["IMAGE"] + ":" + vars["IMAGE_TAG"]
	s := readManifest(t).Spec.Template.Spec
	for _, c := range append(s.InitContainers, s.Containers...) {
		if c.Image != want || c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: image %q pull %q, want %q IfNotPresent", c.Name, c.Image, c.ImagePullPolicy, want)
		}
		if !slices.Contains(imageBinaries, c.Command[0]) {
			t.Errorf("%s runs %s, which the image does not hold (%v)", c.Name, c.Command[0], imageBinaries)
		}
	}
}

// imageBinaries are the files make image puts at the image's root.
var imageBinaries = []string{"/" + conflist.PluginType, "/" + hookcmd.Binary, "/" + Binary}

// TestDaemonSetInstaller runs the init container's command as written (its
// own arguments, in process), the image root and the host paths moved into
// temporary trees; behind Terway it is the same command without the
// conflist arguments.
func TestDaemonSetInstaller(t *testing.T) {
	ic := readManifest(t).Spec.Template.Spec.InitContainers[0]
	cmd := append(slices.Clone(ic.Command), ic.Args...)
	if len(cmd) < 2 || cmd[0] != "/"+Binary || cmd[1] != "install" {
		t.Fatalf("installer command %v", cmd)
	}
	for _, tc := range []struct {
		name     string
		conflist bool
	}{{"install conflist", true}, {"terway: conflist left alone", false}} {
		t.Run(tc.name, func(t *testing.T) {
			image, host := t.TempDir(), t.TempDir()
			for _, b := range imageBinaries {
				if err := os.WriteFile(filepath.Join(image, b), []byte("binary "+b), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, d := range []string{"opt/cni/bin", "etc/cni/net.d"} {
				if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			conflist := filepath.Join(host, "etc/cni/net.d/10-rdmanet.conflist")
			orig := `{"cniVersion":"1.0.0","name":"rdmanet","plugins":[{"type":"ptp"}]}`
			if err := os.WriteFile(conflist, []byte(orig), 0o644); err != nil {
				t.Fatal(err)
			}
			args := installerArgs(cmd[1:], image, host, tc.conflist)
			for round := range 2 {
				code, out, errOut := run(args...)
				if code != ExitOK {
					t.Fatalf("round %d: %v: code %d\n%s%s", round, args, code, out, errOut)
				}
				t.Logf("round %d:\n%s", round, out)
				checkInstalled(t, image, host, conflist, orig, tc.conflist)
				if round == 1 && strings.Count(out, "unchanged") != strings.Count(out, "\n") {
					t.Errorf("second install changed something:\n%s", out)
				}
			}
		})
	}
}

// hostIPs is what kubelet gives the installer for the downward API's
// status.hostIPs (its $(HOST_IPS)) in TestDaemonSetInstaller.
const hostIPs = "192.0.2.10,fd00:1::10"

// installerArgs maps the installer's arguments onto the temporary trees:
// --binaries-from / to the image root, /host/... to the host tree,
// $(HOST_IPS) to hostIPs as kubelet expands it; without conflist it drops
// --conflist, --wait, --set and --node-addresses as docs/install.md says.
func installerArgs(cmd []string, image, host string, conflist bool) []string {
	var args []string
	for i := 0; i < len(cmd); i++ {
		a := cmd[i]
		switch {
		case !conflist && (a == "--conflist" || a == "--wait" || a == "--set" || a == "--node-addresses"):
			i++
			continue
		case a == "$(HOST_IPS)":
			a = hostIPs
		case a == "/" && i > 0 && cmd[i-1] == "--binaries-from":
			a = image
		case strings.HasPrefix(a, "/host/"):
			a = filepath.Join(host, strings.TrimPrefix(a, "/host/"))
		}
		args = append(args, a)
	}
	return args
}

func checkInstalled(t *testing.T, image, host, conflist, orig string, wantEntry bool) {
	t.Helper()
	for _, name := range install.PluginBinaries {
		got, err := os.ReadFile(filepath.Join(host, "opt/cni/bin", name))
		want, werr := os.ReadFile(filepath.Join(image, name))
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Errorf("%s not installed: %v %v", name, err, werr)
		}
		if st, err := os.Stat(filepath.Join(host, "opt/cni/bin", name)); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v %v", name, st, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(host, "opt/cni/bin/.*")); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
	if _, err := os.Stat(filepath.Join(host, "opt/cni/bin/rdma-chain-ops")); !os.IsNotExist(err) {
		t.Errorf("the operator binary went to the host: %v", err)
	}
	data, _ := os.ReadFile(conflist)
	if !wantEntry {
		if string(data) != orig {
			t.Errorf("conflist changed:\n%s", data)
		}
		return
	}
	if probs := validate.Conflist(data, ""); len(probs) != 0 || !bytes.Contains(data, []byte(`"type": "rdma-chain"`)) {
		t.Errorf("installed conflist: %v\n%s", probs, data)
	}
	if !bytes.Contains(data, []byte(`"nodeAddresses": ["192.0.2.10","fd00:1::10"]`)) {
		t.Errorf("installed entry lacks nodeAddresses %s:\n%s", hostIPs, data)
	}
	if st, _ := os.Stat(conflist); st.Mode().Perm() != 0o644 {
		t.Errorf("conflist mode %v", st.Mode())
	}
}
