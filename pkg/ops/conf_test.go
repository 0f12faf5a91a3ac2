package ops

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testenv"

	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
)

func confDir() string { return filepath.Join(testenv.RepoRoot(), "conf") }

// TestExampleConflists: every example conflist passes validate.
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

// TestTerwayConfigMap: the conflist embedded in the eni-config example
// passes validate too, and so does the file terway-cli makes of it with
// datapath v2 (cilium-cni appended last), with a note on the order.
func TestTerwayConfigMap(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(confDir(), "terway-eni-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := bytes.Cut(data, []byte("10-terway.conflist: |\n"))
	if !ok {
		t.Fatal("no 10-terway.conflist key")
	}
	if probs := validateConflist(block, ""); len(probs) != 0 {
		t.Errorf("problems: %v", probs)
	}
	var list map[string]any
	if err := json.Unmarshal(block, &list); err != nil {
		t.Fatal(err)
	}
	list["plugins"] = append(list["plugins"].([]any), map[string]any{"type": "cilium-cni", "data-path": "datapathv2"})
	node, _ := json.Marshal(list)
	if probs := validateConflist(node, ""); len(probs) != 0 {
		t.Errorf("the node's conflist: problems %v", probs)
	}
	if notes := orderNotes(node); len(notes) != 2 || !strings.Contains(notes[0], "terway -> rdma-chain -> cilium-cni") {
		t.Errorf("the node's conflist: notes %q", notes)
	}
}

// manifest is the part of the DaemonSet the tests check.
type manifest struct {
	Kind string `json:"kind"`
	Spec struct {
		Template struct {
			Spec podSpec `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

type podSpec struct {
	HostNetwork        bool         `json:"hostNetwork"`
	HostPID            bool         `json:"hostPID"`
	AutomountToken     *bool        `json:"automountServiceAccountToken"`
	ServiceAccountName string       `json:"serviceAccountName"`
	InitContainers     []container  `json:"initContainers"`
	Containers         []container  `json:"containers"`
	Volumes            []volumeSpec `json:"volumes"`
}

type container struct {
	Name    string   `json:"name"`
	Command []string `json:"command"`
	Env     []struct {
		Name, Value string
	} `json:"env"`
	SecurityContext struct {
		Privileged   *bool `json:"privileged"`
		Capabilities struct {
			Add, Drop []string
		} `json:"capabilities"`
		AllowPrivilegeEscalation *bool `json:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `json:"readOnlyRootFilesystem"`
	} `json:"securityContext"`
	VolumeMounts []struct {
		Name, MountPath, MountPropagation string
		ReadOnly                          bool
	} `json:"volumeMounts"`
}

type volumeSpec struct {
	Name     string `json:"name"`
	HostPath *struct {
		Path string `json:"path"`
	} `json:"hostPath"`
}

// readManifest drops the YAML comment lines and decodes the JSON flow.
func readManifest(t *testing.T) manifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(confDir(), "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines = append(lines, l)
		}
	}
	var m manifest
	dec := json.NewDecoder(strings.NewReader(strings.Join(lines, "\n")))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("daemonset.yaml: %v", err)
	}
	if m.Kind != "DaemonSet" {
		t.Fatalf("kind %q", m.Kind)
	}
	return m
}

// TestDaemonSetPrivileges: host paths, capabilities and mounts are exactly
// what the installer and reconcile need.
func TestDaemonSetPrivileges(t *testing.T) {
	s := readManifest(t).Spec.Template.Spec
	if !s.HostNetwork || s.HostPID || s.AutomountToken == nil || *s.AutomountToken || s.ServiceAccountName != "" {
		t.Errorf("pod: hostNetwork %v (want true: reconcile restores devices to the host netns), hostPID %v, token %v, service account %q",
			s.HostNetwork, s.HostPID, s.AutomountToken, s.ServiceAccountName)
	}
	var hostPaths []string
	for _, v := range s.Volumes {
		if v.HostPath != nil {
			hostPaths = append(hostPaths, v.HostPath.Path)
		}
	}
	slices.Sort(hostPaths)
	want := []string{"/etc/cni/net.d", "/opt/cni/bin", "/run/containerd/containerd.sock", "/var/lib/cni", "/var/run/netns"}
	if !slices.Equal(hostPaths, want) {
		t.Errorf("hostPaths %v, want %v", hostPaths, want)
	}
	if len(s.InitContainers) != 1 || len(s.Containers) != 1 {
		t.Fatalf("containers: %d init, %d main", len(s.InitContainers), len(s.Containers))
	}
	checkContainer(t, s.InitContainers[0], nil, map[string]string{"cni-bin": "rw", "cni-conf": "rw"})
	checkContainer(t, s.Containers[0], []string{"NET_ADMIN", "SYS_ADMIN"}, map[string]string{
		"cni-bin": "ro", "cni-conf": "ro", "cni-state": "rw", "netns": "ro HostToContainer", "cri-socket": "rw"})
}

func checkContainer(t *testing.T, c container, add []string, mounts map[string]string) {
	t.Helper()
	sc := c.SecurityContext
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged", c.Name)
	}
	if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) || !slices.Equal(sc.Capabilities.Add, add) {
		t.Errorf("%s: capabilities drop %v add %v, want drop [ALL] add %v", c.Name, sc.Capabilities.Drop, sc.Capabilities.Add, add)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: allowPrivilegeEscalation %v, readOnlyRootFilesystem %v", c.Name, sc.AllowPrivilegeEscalation, sc.ReadOnlyRootFilesystem)
	}
	got := map[string]string{}
	for _, m := range c.VolumeMounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		got[m.Name] = strings.TrimSpace(mode + " " + m.MountPropagation)
	}
	if !mapsEqual(got, mounts) {
		t.Errorf("%s: mounts %v, want %v", c.Name, got, mounts)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestDaemonSetReconcilePaths: every path reconcile is given lies under
// one of its mounts, at the path the host uses.
func TestDaemonSetReconcilePaths(t *testing.T) {
	c := readManifest(t).Spec.Template.Spec.Containers[0]
	if len(c.Command) < 2 || c.Command[0] != "/"+Binary || c.Command[1] != "reconcile" || !slices.Contains(c.Command, "--interval") {
		t.Fatalf("command %v", c.Command)
	}
	for i, a := range c.Command[2:] {
		if !strings.HasPrefix(a, "/") {
			continue
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m struct {
			Name, MountPath, MountPropagation string
			ReadOnly                          bool
		}) bool {
			return a == m.MountPath || strings.HasPrefix(a, m.MountPath+"/")
		}) {
			t.Errorf("argument %d %s is not under a mount", i+2, a)
		}
	}
}

var buildOnce = sync.OnceValues(func() (string, error) {
	if b := os.Getenv("RDMA_CHAIN_BIN"); b != "" {
		return b, nil
	}
	dir, err := os.MkdirTemp("", "rdma-chain-ops-test")
	if err != nil {
		return "", err
	}
	for out, pkg := range map[string]string{"rdma-chain": "./plugins/meta/rdma-chain", hookcmd.Binary: "./cmd/rdma-chain-smc-hook", Binary: "./cmd/rdma-chain-ops"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, out), pkg)
		cmd.Dir = testenv.RepoRoot()
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", &exec.ExitError{Stderr: b}
		}
	}
	return filepath.Join(dir, "rdma-chain"), nil
})

// pluginBinary is the built plugin: $RDMA_CHAIN_BIN (make sets it) or a
// fresh build, with the SMC socket hook and the operator binary beside it.
func pluginBinary(t *testing.T) string {
	t.Helper()
	b, err := buildOnce()
	if err != nil {
		t.Fatalf("build plugin: %v", err)
	}
	return b
}

// TestInstallerScript runs the init container's exact script with its env,
// the host paths moved into a temporary "host" tree.
func TestInstallerScript(t *testing.T) {
	ic := readManifest(t).Spec.Template.Spec.InitContainers[0]
	if len(ic.Command) != 3 || ic.Command[0] != "/bin/sh" || ic.Command[1] != "-c" {
		t.Fatalf("installer command %v", ic.Command)
	}
	bin := pluginBinary(t)
	for _, tc := range []struct {
		name    string
		install string
	}{{"install conflist", "true"}, {"terway: conflist left alone", "false"}} {
		t.Run(tc.name, func(t *testing.T) {
			host := t.TempDir()
			env := installerEnv(t, ic, host, bin, tc.install)
			conflist := filepath.Join(host, "etc/cni/net.d/10-rdmanet.conflist")
			orig := `{"cniVersion":"1.0.0","name":"rdmanet","plugins":[{"type":"ptp"}]}`
			for _, d := range []string{"opt/cni/bin", "etc/cni/net.d"} {
				if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(conflist, []byte(orig), 0o644); err != nil {
				t.Fatal(err)
			}
			for round := range 2 {
				cmd := exec.Command(ic.Command[0], ic.Command[1], ic.Command[2])
				cmd.Env = env
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("round %d: %v\n%s", round, err, out)
				}
				t.Logf("round %d:\n%s", round, out)
				checkInstalled(t, host, bin, conflist, orig, tc.install == "true")
				if tc.install == "true" && round == 1 && !strings.Contains(string(out), "unchanged") {
					t.Errorf("second install changed the conflist:\n%s", out)
				}
			}
		})
	}
}

func installerEnv(t *testing.T, ic container, host, bin, install string) []string {
	env := []string{"PATH=" + os.Getenv("PATH")}
	seen := map[string]bool{}
	for _, e := range ic.Env {
		v := e.Value
		switch {
		case e.Name == "RDMA_CHAIN":
			v = bin
		case e.Name == "RDMA_CHAIN_OPS":
			v = filepath.Join(filepath.Dir(bin), Binary)
		case e.Name == "INSTALL_CONFLIST":
			v = install
		case strings.HasPrefix(v, "/host/"):
			v = filepath.Join(host, strings.TrimPrefix(v, "/host/"))
		}
		seen[e.Name] = true
		env = append(env, e.Name+"="+v)
	}
	for _, n := range []string{"RDMA_CHAIN", "RDMA_CHAIN_OPS", "HOST_CNI_BIN_DIR", "HOST_CONFLIST", "INSTALL_CONFLIST", "INSTALL_AFTER", "INSTALL_SET"} {
		if !seen[n] {
			t.Fatalf("installer env lacks %s", n)
		}
	}
	return env
}

func checkInstalled(t *testing.T, host, bin, conflist, orig string, wantEntry bool) {
	t.Helper()
	for name, src := range map[string]string{"rdma-chain": bin, hookcmd.Binary: filepath.Join(filepath.Dir(bin), hookcmd.Binary)} {
		got, err := os.ReadFile(filepath.Join(host, "opt/cni/bin", name))
		want, werr := os.ReadFile(src)
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
	data, _ := os.ReadFile(conflist)
	if !wantEntry {
		if string(data) != orig {
			t.Errorf("conflist changed:\n%s", data)
		}
		return
	}
	if probs := validateConflist(data, ""); len(probs) != 0 || !bytes.Contains(data, []byte(`"type": "rdma-chain"`)) {
		t.Errorf("installed conflist: %v\n%s", probs, data)
	}
	if st, _ := os.Stat(conflist); st.Mode().Perm() != 0o644 {
		t.Errorf("conflist mode %v", st.Mode())
	}
}
