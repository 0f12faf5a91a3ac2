package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips t on a developer machine and fails it under CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true, tier cannot run: "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequireRoot stops t unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root")
	}
}

// RequireBinary returns the path of a binary found in PATH or at one of dirs,
// and stops t when it is missing.
func RequireBinary(t testing.TB, name string, dirs ...string) string {
	t.Helper()
	for _, d := range dirs {
		p := d + "/" + name
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	Unavailable(t, "binary %q not found (run make deps)", name)
	return ""
}

// module is the go.mod line that marks the checkout's top folder.
const module = "module github.com/rdma-chain/rdma-chain"

// repoRoot is found once, from the folder the test binary started in
// (go test runs it in its package's folder), before any test changes it.
// The source file's own path cannot tell: make builds tests -trimpath.
var repoRoot, repoRootErr = findRepoRoot()

// RepoRoot is the repository's top folder, wherever the checkout lives.
func RepoRoot() string {
	if repoRootErr != nil {
		panic(repoRootErr)
	}
	return repoRoot
}

func findRepoRoot() (string, error) {
	start, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return moduleRootAbove(start)
}

func moduleRootAbove(start string) (string, error) {
	for dir := start; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && declaresModule(string(b)) {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("testenv: no folder at or above %s has the go.mod of %s", start, strings.TrimPrefix(module, "module "))
		}
	}
}

func declaresModule(gomod string) bool {
	for line := range strings.Lines(gomod) {
		if strings.TrimSpace(line) == module {
			return true
		}
	}
	return false
}

// ToolsDir is a folder under the project-local .tools/ that make deps fills:
// ToolsDir("bin") for cnitool, ToolsDir("cni", "bin") for the reference plugins.
func ToolsDir(elem ...string) string {
	return filepath.Join(append([]string{RepoRoot(), ".tools"}, elem...)...)
}

// SocketDir returns a new directory, removed after the test, whose path is
// short enough for unix sockets (108 bytes): t.TempDir() paths, with the
// test's name in them, can exceed it.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// BenchRow adds one row of `make bench`'s table: appended to the file
// $RC_BENCH_OUT names (scripts/bench.sh collects the rows there), or logged
// when it is unset.
func BenchRow(b testing.TB, line string) {
	b.Helper()
	path := os.Getenv("RC_BENCH_OUT")
	if path == "" {
		b.Log(line)
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		b.Fatal(err)
	}
}

// Eventually polls cond every 10 ms until it returns true or timeout
// passes, and fails t with what the last poll said: tests wait for a
// condition, never sleep and then assert.
func Eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	wait, why := Within(t, timeout)
	deadline := time.Now().Add(wait)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v%s: %s", wait.Round(time.Second), why, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// deadlineMargin is what a wait leaves of the test binary's -timeout for
// its failure to be reported and the test's cleanups to run.
const deadlineMargin = 2 * time.Minute

// Within is how long a wait of timeout may take: less when the test
// binary's -timeout would end first, so that the wait fails with what it
// saw instead of the binary panicking with goroutine dumps mid-wait. why
// says so when it is less.
func Within(t testing.TB, timeout time.Duration) (wait time.Duration, why string) {
	d, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return timeout, ""
	}
	end, ok := d.Deadline()
	if !ok {
		return timeout, ""
	}
	left := time.Until(end) - deadlineMargin
	if left >= timeout {
		return timeout, ""
	}
	return max(left, 0), fmt.Sprintf(" (of %v: cut short %v before the test binary's -timeout)", timeout, deadlineMargin)
}

// KernelLacks is for a test of how the code behaves on a kernel without a
// feature (this project's development and CI machines have no RDMA, SMC or
// ipvlan). present says whether the running kernel has it: then the test
// cannot run, which skips on a developer machine and fails under CI.
func KernelLacks(t testing.TB, feature string, present bool) {
	t.Helper()
	if present {
		Unavailable(t, "this kernel has %s; the test is for kernels without it (the VM tier covers kernels with it)", feature)
	}
}

// GoCmd is `go SUBCOMMAND -trimpath ARGS...` with cgo off, run in the
// checkout: every build inside a test is made the one way make builds
// every binary and test binary but -race's (the Makefile's GO_BUILD and
// GO_TEST), so that it reuses make's build cache instead of compiling the
// dependencies again.
func GoCmd(subcommand string, args ...string) *exec.Cmd {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	cmd := exec.Command(gobin, append([]string{subcommand, "-trimpath"}, args...)...)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

// Build builds the package pkg (relative to the repository, e.g.
// "./integration/netns/crash_plugin") with tags into bin, statically.
func Build(t testing.TB, bin, pkg, tags string) {
	t.Helper()
	cmd := GoCmd("build", "-tags", tags, "-ldflags", "-s -w", "-o", bin, pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s (tags %q): %v\n%s", pkg, tags, err, out)
	}
}

// LinkedPackages lists the packages the binary of pkg (relative to the
// repository, e.g. "./plugins/meta/rdma-chain") links, as `go list -deps`
// says: a binary's link guard asserts on it.
func LinkedPackages(t testing.TB, pkg string) map[string]bool {
	t.Helper()
	out, err := GoCmd("list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	linked := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		linked[p] = true
	}
	if len(linked) < 50 {
		t.Fatalf("go list -deps %s listed only %d packages", pkg, len(linked))
	}
	return linked
}

// LinksUnder reports the first of linked that is prefix or under it.
func LinksUnder(linked map[string]bool, prefix string) (string, bool) {
	var found []string
	for p := range linked {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			found = append(found, p)
		}
	}
	if len(found) == 0 {
		return "", false
	}
	slices.Sort(found)
	return found[0], true
}
