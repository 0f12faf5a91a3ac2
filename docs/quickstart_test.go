package docs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The quick start's stand-ins: the test binary, run under the name of
// rdma, make, kustomize or kubectl, checks each command against the tree
// and answers as the real tool would. quickEnv names the file of what
// earlier commands did (the pushed repository, the applied pod) and the
// checkout's root.
const (
	quickState = "RC_DOCS_QUICK_STATE"
	quickRoot  = "RC_DOCS_QUICK_ROOT"
)

// TestMain runs a stand-in when the binary is started under one's name
// by TestQuickStart, the tests otherwise.
func TestMain(m *testing.M) {
	if fake, ok := standIns[filepath.Base(os.Args[0])]; ok && os.Getenv(quickState) != "" {
		if err := fake(os.Args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "%s %s: %v\n", filepath.Base(os.Args[0]), strings.Join(os.Args[1:], " "), err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestQuickStart runs every shell block of install.md's Quick start, in
// a folder that holds the checkout as `rdma-chain`, against the stand-ins;
// a command none of them knows fails it, and so does one whose arguments
// the tree does not back (a make target, an overlay, the image's name, a
// node label, the DaemonSet, the example pod).
func TestQuickStart(t *testing.T) {
	blocks := quickStartBlocks(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, work := filepath.Join(dir, "bin"), filepath.Join(dir, "work")
	for _, d := range []string{bin, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name := range standIns {
		if err := os.Symlink(self, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(root, filepath.Join(work, "rdma-chain")); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state.json")
	for i, block := range blocks {
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), quickState+"="+state, quickRoot+"="+root)
		out, err := cmd.CombinedOutput()
		t.Logf("block %d:\n%s", i+1, out)
		if err != nil {
			t.Errorf("install.md's quick start, block %d: %v", i+1, err)
		}
	}
	var st quickRun
	readQuickState(state, &st)
	if st.Pod == "" || !st.Applied || !st.Labelled || !st.Checked {
		t.Errorf("the quick start does not push, label a node, apply, wait for the rollout and apply a pod: %+v", st)
	}
}

// quickStartBlocks are the shell blocks of install.md's Quick start.
func quickStartBlocks(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("install.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Quick start\n")
	if !ok {
		t.Fatal("install.md has no Quick start section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	if len(out) < 2 {
		t.Fatalf("install.md's Quick start has %d shell blocks", len(out))
	}
	return out
}

// quickRun is what the stand-ins saw, kept between their runs.
type quickRun struct {
	Pushed   string // the repository make push pushed to
	Labelled bool   // a node got an overlay's label
	Applied  bool   // a kustomization with the pushed image was applied
	Checked  bool   // the DaemonSet's rollout was waited for
	Pod      string // the example pod applied
}

func readQuickState(path string, st *quickRun) {
	if data, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(data, st)
	}
}

// standIns are the commands the quick start may run.
var standIns = map[string]func(args []string) error{
	"rdma":      standInRdma,
	"make":      standInMake,
	"kustomize": standInKustomize,
	"kubectl":   standInKubectl,
}

// withState runs f on the stand-ins' state and saves it.
func withState(f func(st *quickRun) error) error {
	path := os.Getenv(quickState)
	var st quickRun
	readQuickState(path, &st)
	if err := f(&st); err != nil {
		return err
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// inRoot is a path of the checkout.
func inRoot(p string) string { return filepath.Join(os.Getenv(quickRoot), p) }

func standInRdma(args []string) error {
	if !slices.Equal(args, []string{"system", "show"}) {
		return errors.New("not `rdma system show`")
	}
	fmt.Println("netns shared copy-on-fork on")
	return nil
}

// standInMake answers make push with REGISTRY=HOST/REPO, in the
// checkout.
func standInMake(args []string) error {
	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		return fmt.Errorf("not run in the checkout: %w", err)
	}
	if len(args) != 2 || args[0] != "push" || !strings.Contains(string(makefile), "\npush: ") {
		return errors.New("not `make push REGISTRY=...`, or the Makefile has no push target")
	}
	repo, ok := strings.CutPrefix(args[1], "REGISTRY=")
	if !ok || !strings.Contains(string(makefile), "--to $(REGISTRY)") || strings.ContainsAny(repo, "@") {
		return errors.New("not REGISTRY=HOST/REPO[:TAG], or make push does not read REGISTRY")
	}
	repo = strings.Split(repo, ":")[0]
	fmt.Printf("%s:v0.2.0-12-gabc1234@sha256:%s\n", repo, strings.Repeat("ab", 32))
	return withState(func(st *quickRun) error { st.Pushed = repo; return nil })
}

// standInKustomize answers kustomize's create --resources DIR (an overlay
// of the checkout) and edit set image of the base's image to the pushed
// repository by digest.
func standInKustomize(args []string) error {
	switch {
	case len(args) == 3 && args[0] == "create" && args[1] == "--resources":
		real, err := filepath.EvalSymlinks(args[2])
		if err != nil {
			return err
		}
		if !strings.HasPrefix(real, inRoot("deploy/overlays")+"/") {
			return fmt.Errorf("%s is no overlay of the checkout", args[2])
		}
		if _, err := os.Stat(filepath.Join(real, "kustomization.yaml")); err != nil {
			return err
		}
		return os.WriteFile("kustomization.yaml", []byte("resources:\n  - "+args[2]+"\n"), 0o644)
	case len(args) == 4 && slices.Equal(args[:3], []string{"edit", "set", "image"}):
		return setImage(args[3])
	}
	return errors.New("not a command the quick start should give")
}

// setImage checks OLD=NEW@sha256:... of kustomize edit set image.
func setImage(arg string) error {
	old, repl, _ := strings.Cut(arg, "=")
	base, err := os.ReadFile(inRoot("deploy/base/daemonset.yaml"))
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`(?m)^\s+image: ` + regexp.QuoteMeta(old) + `:`).Match(base) {
		return fmt.Errorf("deploy/base's DaemonSet names no image %s", old)
	}
	repo, digest, ok := strings.Cut(repl, "@")
	if !ok || (digest != "sha256:..." && !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(digest)) {
		return fmt.Errorf("%s: not REPO@sha256:DIGEST", repl)
	}
	return withState(func(st *quickRun) error {
		if repo != st.Pushed {
			return fmt.Errorf("sets %s, make push pushed %q", repo, st.Pushed)
		}
		f, err := os.OpenFile("kustomization.yaml", os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(f, "images:\n  - name: %s\n    newName: %s\n", old, repo)
		return errors.Join(err, f.Close())
	})
}

// standInKubectl answers the quick start's kubectl commands.
func standInKubectl(args []string) error {
	line := strings.Join(args, " ")
	switch {
	case len(args) == 4 && args[0] == "label" && args[1] == "node":
		return labelNode(args[3])
	case len(args) == 3 && args[0] == "apply" && args[1] == "-k":
		return applyKustomization(args[2])
	case line == "-n kube-system rollout status ds/rdma-chain":
		return rolloutStatus()
	case len(args) == 3 && args[0] == "apply" && args[1] == "-f":
		return applyPod(args[2])
	}
	return withState(func(st *quickRun) error {
		pod := "pod/" + st.Pod
		switch {
		case st.Pod != "" && line == "wait --for=condition=Ready "+pod:
			fmt.Printf("%s condition met\n", pod)
		case st.Pod != "" && len(args) > 3 && args[0] == "exec" && args[1] == st.Pod && args[2] == "--":
			fmt.Printf("(%s)\n", strings.Join(args[3:], " "))
		default:
			return errors.New("not a command the quick start should give")
		}
		return nil
	})
}

// labelNode checks that KEY=true is a node label the overlays select
// nodes by.
func labelNode(kv string) error {
	key, value, _ := strings.Cut(kv, "=")
	nodes, err := os.ReadFile(inRoot("deploy/overlays/generic/nodes.yaml"))
	if err != nil {
		return err
	}
	if value != "true" || !strings.Contains(string(nodes), "{key: "+key+", operator: In, values: [\"true\"]}") {
		return fmt.Errorf("%s is not a label the generic overlay selects nodes by", kv)
	}
	return withState(func(st *quickRun) error { st.Labelled = true; return nil })
}

// applyKustomization checks that DIR is a kustomization of an overlay
// of the checkout with the pushed image.
func applyKustomization(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return err
	}
	return withState(func(st *quickRun) error {
		if st.Pushed == "" || !strings.Contains(string(data), "newName: "+st.Pushed) {
			return fmt.Errorf("%s does not set the pushed image:\n%s", dir, data)
		}
		fmt.Println("daemonset.apps/rdma-chain created")
		st.Applied = true
		return nil
	})
}

// rolloutStatus checks that the base's DaemonSet is rdma-chain in
// kube-system.
func rolloutStatus() error {
	base, err := os.ReadFile(inRoot("deploy/base/daemonset.yaml"))
	if err != nil {
		return err
	}
	if !strings.Contains(string(base), "kind: DaemonSet\nmetadata:\n  name: rdma-chain\n  namespace: kube-system\n") {
		return errors.New("deploy/base's DaemonSet is not rdma-chain in kube-system")
	}
	return withState(func(st *quickRun) error {
		if !st.Applied {
			return errors.New("nothing applied yet")
		}
		fmt.Println(`daemon set "rdma-chain" successfully rolled out`)
		st.Checked = true
		return nil
	})
}

// applyPod checks that FILE is a Pod (decoded strictly) whose container
// asks for one of the entry's default resource names.
func applyPod(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if pod.Kind != "Pod" || pod.Name == "" {
		return fmt.Errorf("%s is no named Pod", file)
	}
	config, err := os.ReadFile(inRoot("pkg/config/config.go"))
	if err != nil {
		return err
	}
	asks := false
	for _, c := range pod.Spec.Containers {
		for res := range c.Resources.Limits {
			asks = asks || regexp.MustCompile(`c\.ResourceNames = \[\]string\{[^}]*"`+regexp.QuoteMeta(string(res))+`"`).Match(config)
		}
	}
	if !asks {
		return fmt.Errorf("%s asks for none of the entry's default resourceNames", file)
	}
	return withState(func(st *quickRun) error {
		fmt.Printf("pod/%s created\n", pod.Name)
		st.Pod = pod.Name
		return nil
	})
}
