package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// treeFS is an in-memory copy of this directory's kustomize files at
// /deploy, so a test can add kustomizations of its own beside them (as a
// user's overlay lists ours) without writing into the tree.
func treeFS(t *testing.T) filesys.FileSystem {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(filepath.Join("/deploy", p), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

// rendered is what `kubectl apply -k DIR` would send: the node
// component's DaemonSet (rdma-chain) decoded strictly into the API's own
// type (a field the API server would reject fails here), and every object
// as a generic map by kind.
type rendered struct {
	ds      appsv1.DaemonSet
	dsYAML  []byte // as kustomize prints it
	objects map[string][]map[string]any
}

func render(t *testing.T, mem filesys.FileSystem, dir string) rendered {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := rendered{objects: map[string][]map[string]any{}}
	n := 0
	for _, res := range m.Resources() {
		data, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, err := res.Map()
		if err != nil {
			t.Fatal(err)
		}
		r.objects[res.GetKind()] = append(r.objects[res.GetKind()], obj)
		if res.GetKind() != "DaemonSet" || res.GetName() != "rdma-chain" {
			continue
		}
		n++
		r.dsYAML = data
		if err := yaml.UnmarshalStrict(data, &r.ds); err != nil {
			t.Fatalf("%s: DaemonSet: %v\n%s", dir, err, data)
		}
	}
	if n != 1 {
		t.Fatalf("%s: %d DaemonSets rdma-chain, want 1", dir, n)
	}
	return r
}

// flagArgs reads an argument list of --flag value pairs and bare --flags
// (the given booleans) into a map; a flag given twice fails.
func flagArgs(t *testing.T, args []string, booleans ...string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			t.Fatalf("argument %d %q is not a flag: %q", i, a, args)
		}
		if _, dup := got[a]; dup {
			t.Fatalf("%s given twice: %q", a, args)
		}
		isBool := false
		for _, b := range booleans {
			isBool = isBool || a == b
		}
		if isBool {
			got[a] = "true"
			continue
		}
		if i+1 == len(args) {
			t.Fatalf("%s has no value: %q", a, args)
		}
		got[a] = args[i+1]
		i++
	}
	return got
}
