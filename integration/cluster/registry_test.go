//go:build cluster

package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// guestRegistryAddr is where the nodes reach the tier's image registry:
// qemu's user network forwards it (guestfwd, through fwd) to the registry
// on the host's loopback, and the guest's containerd speaks plain HTTP to
// it (integration/cluster/guest/init.sh).
const guestRegistryAddr = "10.0.2.101:5000"

// startRegistry runs distribution's registry (scripts/registry.sh builds
// it) on a free loopback port, its storage under cp.dir, as one of cp's
// parts, and returns its port once /v2/ answers.
func (cp *controlPlane) startRegistry(t *testing.T) int {
	t.Helper()
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "scripts/registry.sh")).Output()
	if err != nil {
		t.Fatalf("scripts/registry.sh: %v: %s", err, stderrOf(err))
	}
	port := freePort(t)
	conf := filepath.Join(cp.dir, "registry.yml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "version: 0.1\nlog: {level: info}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: \"127.0.0.1:%d\"}\n",
		filepath.Join(cp.dir, "registry"), port), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	cp.run(t, "registry", strings.TrimSpace(string(out)), "serve", conf)
	url := fmt.Sprintf("http://127.0.0.1:%d/v2/", port)
	cp.pollFunc(t, time.Minute, func() (bool, string) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	}) // a failure shows the registry's log among cp's parts' tails
	return port
}

// pushedDigest is what make push prints last: REF@DIGEST.
var pushedDigest = regexp.MustCompile(`@(sha256:[0-9a-f]{64})\s*$`)

// pushImage runs docs/install.md's quick-start push line (`make push
// REGISTRY=registry.example.com/rdma/rdma-chain`) with the registry on
// port for its host and this machine's architecture alone (IMAGE_ARCHES:
// the nodes run on it; make test-push checks both), and returns the
// repository as the nodes name it and the digest make push printed.
func pushImage(t *testing.T, port int) (repo, digest string) {
	t.Helper()
	root := testenv.RepoRoot()
	line := quickStartPushLine(t, root)
	host, path, _ := strings.Cut(strings.TrimPrefix(line, "make push REGISTRY="), "/")
	args := strings.Fields(strings.Replace(line, host, fmt.Sprintf("127.0.0.1:%d", port), 1))
	cmd := exec.Command(args[0], append(args[1:], "IMAGE_ARCHES="+runtime.GOARCH)...)
	cmd.Dir = root
	// Not the outer make's jobserver or level: a command line of its own.
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	m := pushedDigest.FindStringSubmatch(strings.TrimSpace(string(out)))
	if m == nil {
		t.Fatalf("%s printed no REF@DIGEST last:\n%s", strings.Join(cmd.Args, " "), out)
	}
	t.Logf("CLUSTER-TIME %s: %.1f s; %s", strings.Join(cmd.Args, " "), time.Since(start).Seconds(), lastLine(string(out)))
	return guestRegistryAddr + "/" + path, m[1]
}

// quickStartPushLine is the first `make push REGISTRY=` line of
// docs/install.md (its quick start's).
func quickStartPushLine(t *testing.T, root string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs/install.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		if l := strings.TrimSpace(s.Text()); strings.HasPrefix(l, "make push REGISTRY=") {
			return l
		}
	}
	t.Fatal("docs/install.md has no make push REGISTRY= line")
	return ""
}

// writeInstall writes the admin's kustomization into dir, as the quick
// start makes it: `kustomize create --resources` of src, a directory of
// the repository holding the tier's install (integration/cluster/deploy:
// the generic overlay, the DRA component, the entry), then `kustomize edit set image
// localhost/rdma-chain=REPO@DIGEST`, written here as that command writes
// it (the tier has kubectl's kustomize, which renders but does not edit).
func writeInstall(dir, src, repo, digest string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, filepath.Join(testenv.RepoRoot(), src))
	if err != nil {
		return err
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- digest: %s
  name: localhost/rdma-chain
  newName: %s
`, rel, digest, repo)
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)
}

// pushRelease builds the newest release of docs/releases.md's image for
// this machine's architecture from its commit (scripts/release-image.sh),
// checks its digest against the one docs/releases.md gives for that
// architecture, pushes it to the tier's registry beside this tree's image
// (internal/mkimage/push, what make push runs) and returns the version
// and the digest.
func (cp *controlPlane) pushRelease(t *testing.T) (version, digest string) {
	t.Helper()
	root := testenv.RepoRoot()
	rels, err := testenv.Releases()
	if err != nil {
		t.Fatal(err)
	}
	version = rels[len(rels)-1].Version
	want, builtWith := releaseImageDigest(t, root, version, runtime.GOARCH)
	archive := filepath.Join(cp.dir, "release-image.tar")
	start := time.Now()
	out, err := exec.Command(filepath.Join(root, "scripts/release-image.sh"), version, archive, runtime.GOARCH).Output()
	if err != nil {
		t.Fatalf("scripts/release-image.sh %s: %v: %s", version, err, stderrOf(err))
	}
	if digest = strings.TrimSpace(string(out)); digest != want {
		t.Fatalf("%s's image for linux/%s built from its commit with %s (scripts/release-image.sh sets GOTOOLCHAIN) is %s; docs/releases.md says %s",
			version, runtime.GOARCH, builtWith, digest, want)
	}
	if pushed := cp.pushArchive(t, archive, "dev", strings.TrimPrefix(cp.repo, guestRegistryAddr+"/")+":"+version); pushed != digest {
		t.Fatalf("pushing %s's image: the registry has %s, the archive %s", version, pushed, digest)
	}
	t.Logf("CLUSTER-TIME %s's image (linux/%s, %s, as docs/releases.md gives it) built from its commit and pushed in %.1f s",
		version, runtime.GOARCH, digest, time.Since(start).Seconds())
	return version, digest
}

// releaseImageDigest reads docs/releases.md's "Images" table: the digest
// of version's image for linux/arch, and the Go it was built with.
func releaseImageDigest(t *testing.T, root, version, arch string) (digest, goVersion string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs/releases.md"))
	if err != nil {
		t.Fatal(err)
	}
	col := -1
	row := regexp.MustCompile(`^` + regexp.QuoteMeta(version) + ` \((go[0-9.]+)\)$`)
	for _, l := range strings.Split(string(b), "\n") {
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		for i, c := range cells {
			if c == "linux/"+arch {
				col = i
			}
		}
		if m := row.FindStringSubmatch(cells[0]); m != nil && col > 0 && col < len(cells) {
			return strings.Trim(cells[col], "`"), m[1]
		}
	}
	t.Fatalf("docs/releases.md's Images table has no linux/%s digest of %s", arch, version)
	return "", ""
}

// stderrOf is what a command run by Output wrote to its stderr, when err
// says it failed.
func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// pushArchive pushes the image refName of the OCI archive to the tier's
// registry as repo:tag (internal/mkimage/push, what make push runs) and
// returns the digest it printed.
func (cp *controlPlane) pushArchive(t *testing.T, archive, refName, repoTag string) string {
	t.Helper()
	to := fmt.Sprintf("127.0.0.1:%d/%s", cp.registryPort, repoTag)
	push := exec.Command("go", "-C", filepath.Join(testenv.RepoRoot(), "internal/mkimage"), "run", "-trimpath", "./push",
		"--archive", archive, "--ref-name", refName, "--to", to, "--default-tag", "unused")
	push.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := push.CombinedOutput()
	m := pushedDigest.FindStringSubmatch(strings.TrimSpace(string(out)))
	if err != nil || m == nil {
		t.Fatalf("push %s to %s: %v: %s", archive, to, err, out)
	}
	return m[1]
}

// pushFakeGPU builds the test-only GPU driver (integration/cluster/fakegpu)
// into an image of its own (internal/mkimage, this machine's architecture)
// and pushes it to the tier's registry; it returns the image as the nodes
// name it, by digest.
func (cp *controlPlane) pushFakeGPU(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(cp.dir, "fakegpu")
	testenv.Build(t, filepath.Join(dir, "fakegpu"), "./integration/cluster/fakegpu", "")
	archive := filepath.Join(cp.dir, "fakegpu.tar")
	mk := exec.Command("go", "-C", filepath.Join(testenv.RepoRoot(), "internal/mkimage"), "run", "-trimpath", ".",
		"--out", archive, "--name", "localhost/fake-gpu", "--tag", "test", "--version", "test", "--entrypoint", "/fakegpu",
		"--platform", "linux/"+runtime.GOARCH+"="+dir, "fakegpu")
	mk.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("mkimage fakegpu: %v: %s", err, out)
	}
	return guestRegistryAddr + "/test/fake-gpu@" + cp.pushArchive(t, archive, "test", "test/fake-gpu:test")
}
