package hostile

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/leakcheck"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// minCorpus is the corpus size the project promises.
const minCorpus = 100

var pluginBin string

// TestMain uses $RDMA_CHAIN_BIN (the Makefile's build) when it exists, or
// builds the plugin.
func TestMain(m *testing.M) {
	pluginBin = os.Getenv("RDMA_CHAIN_BIN")
	cleanup := func() {}
	if _, err := os.Stat(pluginBin); pluginBin == "" || err != nil {
		dir, err := os.MkdirTemp("", "rdma-chain-hostile-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cleanup = func() { _ = os.RemoveAll(dir) }
		pluginBin = filepath.Join(dir, "rdma-chain")
		if err := build(pluginBin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			cleanup()
			os.Exit(1)
		}
	}
	leakcheck.Main(m, cleanup)
}

func build(out string) error {
	if b, err := testenv.GoCmd("build", "-o", out, "./plugins/meta/rdma-chain").CombinedOutput(); err != nil {
		return fmt.Errorf("build the plugin: %w\n%s", err, b)
	}
	return nil
}

func TestCorpusSize(t *testing.T) {
	if n := len(loadCorpus(t)); n < minCorpus {
		t.Errorf("corpus has %d cases, want at least %d", n, minCorpus)
	}
}

// newWorld gives a case its folder and an "outside" folder with one file the
// plugin must leave alone.
func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{bin: pluginBin, dir: filepath.Join(t.TempDir(), "case"), out: filepath.Join(t.TempDir(), "out")}
	for _, d := range []string{filepath.Join(w.dir, "bin"), w.out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(w.out, "host-file"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.podNS = filepath.Join(w.dir, "podns")
	w.inNode = func(fn func() error) error { return fn() }
	w.hostState = netnsState
	return w
}

// TestHostile runs every case that needs no root in the test's own netns:
// a correct plugin changes nothing in it for any of them.
func TestHostile(t *testing.T) {
	corpus := loadCorpus(t)
	for _, name := range sortedNames(corpus) {
		c := corpus[name]
		if c.Privileged {
			continue
		}
		t.Run(name, func(t *testing.T) { runCase(t, newWorld(t), c) })
	}
}
