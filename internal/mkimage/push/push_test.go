//go:build push

package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// examplesHost is the registry install.md's push line names; the test puts
// the loopback registry's address in its place.
const examplesHost = "registry.example.com"

// TestMakePush runs install.md's `make push REGISTRY=...` line against
// distribution's registry (scripts/registry.sh builds it) on the loopback,
// then reads the tag back with go-containerregistry: the digest make push
// printed, the archive's index, both platforms, and each platform's image
// holding exactly make build's binaries for its architecture. Every part
// missing fails the test: it never skips.
func TestMakePush(t *testing.T) {
	root := repoRoot(t)
	line := pushLine(t, root)
	addr := startRegistry(t, root)
	cmd := strings.Replace(line, examplesHost, addr, 1)
	out := runMake(t, root, cmd)
	ref, digest := pushedRef(t, out)
	version := strings.TrimSpace(run(t, root, "git", "describe", "--tags", "--always", "--dirty"))
	if dest, _ := strings.CutPrefix(line, "make push REGISTRY="); !strings.Contains(dest, ":") && ref.TagStr() != version {
		t.Errorf("make push without a tag pushed :%s, want the version %s", ref.TagStr(), version)
	}
	archived := archiveDigest(t, filepath.Join(root, "bin/rdma-chain-image.tar"))
	if digest != archived {
		t.Errorf("make push printed %s, the archive's index is %s", digest, archived)
	}
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("reading %s back: %v", ref, err)
	}
	got, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got != digest {
		t.Errorf("the registry's %s is %s, make push printed %s", ref, got, digest)
	}
	checkPlatforms(t, root, idx)
}

// checkPlatforms checks that the index holds linux/amd64 and
// linux/arm64, each an image of one layer with exactly the binaries of
// bin/linux-ARCH/.
func checkPlatforms(t *testing.T, root string, idx v1.ImageIndex) {
	t.Helper()
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Errorf("%s: no platform", d.Digest)
			continue
		}
		platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatalf("%s: %v", d.Digest, err)
		}
		checkImage(t, root, d.Platform.Architecture, img)
	}
	slices.Sort(platforms)
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("the index's platforms are %v, want %v", platforms, want)
	}
}

// checkImage checks that img's config names arch, and its one layer holds
// the files of bin/linux-ARCH/ that make image packs, byte for byte, each
// an ELF of arch's machine.
func checkImage(t *testing.T, root, arch string, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != arch {
		t.Errorf("%s: the config says %s/%s", arch, cf.OS, cf.Architecture)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: %d layers (%v), want 1", arch, len(layers), err)
	}
	files := layerFiles(t, layers[0])
	want := []string{"rdma-chain", "rdma-chain-dra", "rdma-chain-ops", "rdma-chain-smc-hook"}
	if names := slices.Sorted(maps.Keys(files)); !slices.Equal(names, want) {
		t.Errorf("%s: the image holds %v, want %v", arch, names, want)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	for name, data := range files {
		built, err := os.ReadFile(filepath.Join(root, "bin", "linux-"+arch, name))
		if err != nil {
			t.Errorf("%s: %v", arch, err)
			continue
		}
		if !bytes.Equal(data, built) {
			t.Errorf("%s: /%s differs from bin/linux-%s/%s", arch, name, arch, name)
		}
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil || f.Machine != machine {
			t.Errorf("%s: /%s is not an ELF of %v (%v)", arch, name, machine, err)
		}
	}
}

// layerFiles are the regular files of a layer by name.
func layerFiles(t *testing.T, l v1.Layer) map[string][]byte {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			t.Errorf("the layer holds %s, not a file", hdr.Name)
		}
		out[hdr.Name] = data
	}
}

// pushLine is install.md's `make push` line; every such line of the page
// must be the same, on the example registry's host.
func pushLine(t *testing.T, root string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs/install.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := regexp.MustCompile(`(?m)^make push .*$`).FindAllString(string(doc), -1)
	if len(lines) == 0 {
		t.Fatal("docs/install.md gives no `make push` line")
	}
	line, _, _ := strings.Cut(lines[0], " #")
	line = strings.TrimSpace(line)
	for _, l := range lines[1:] {
		if l, _, _ = strings.Cut(l, " #"); strings.TrimSpace(l) != line {
			t.Errorf("docs/install.md gives two make push lines: %q and %q", line, l)
		}
	}
	if !regexp.MustCompile(`^make push REGISTRY=` + regexp.QuoteMeta(examplesHost) + `/[a-z0-9/._-]+(:[A-Za-z0-9._-]+)?$`).MatchString(line) {
		t.Fatalf("docs/install.md's %q: want make push REGISTRY=%s/REPO[:TAG]", line, examplesHost)
	}
	return line
}

// pushedRef reads make push's last line, REF@DIGEST.
func pushedRef(t *testing.T, out string) (name.Tag, v1.Hash) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	ref, digest, ok := strings.Cut(last, "@")
	if !ok {
		t.Fatalf("make push's last line %q is not REF@DIGEST", last)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatalf("make push's last line %q: %v", last, err)
	}
	h, err := v1.NewHash(digest)
	if err != nil {
		t.Fatalf("make push's last line %q: %v", last, err)
	}
	return tag, h
}

// archiveDigest is the digest of the index the archive names by make
// image's default tag.
func archiveDigest(t *testing.T, archive string) v1.Hash {
	t.Helper()
	dir := t.TempDir()
	if err := unpackLayout(archive, dir); err != nil {
		t.Fatal(err)
	}
	top, err := entry(dir, "dev")
	if err != nil {
		t.Fatal(err)
	}
	h, err := top.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// startRegistry runs distribution's registry on a free loopback port, its
// storage in a temporary folder, until the test ends; it returns its
// address once /v2/ answers.
func startRegistry(t *testing.T, root string) string {
	t.Helper()
	bin := strings.TrimSpace(run(t, root, "./scripts/registry.sh"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	conf := fmt.Sprintf("version: 0.1\nlog: {level: info}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: %q}\n", filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			data, _ := os.ReadFile(logf.Name())
			t.Logf("the registry's log:\n%s", tail(string(data), 40))
		}
		logf.Close()
	})
	waitRegistry(t, addr, exited)
	return addr
}

// waitRegistry polls http://addr/v2/ until it answers 200, the registry
// exits or a minute passes.
func waitRegistry(t *testing.T, addr string, exited <-chan error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		select {
		case werr := <-exited:
			t.Fatalf("the registry exited before it answered: %v", werr)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry on %s did not answer /v2/ within a minute: %v", addr, err)
		}
	}
}

// runMake runs a make command line in the checkout as an admin's shell
// would: without the make variables of a make that runs this test. It is
// killed, with its children, 2 minutes before the test binary's -timeout,
// so that the test fails with its output and its cleanups run.
func runMake(t *testing.T, root, line string) string {
	t.Helper()
	ctx := context.Background()
	if deadline, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-2*time.Minute))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "bash", "-c", line)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Dir = root
	for _, e := range os.Environ() {
		if k, _, _ := strings.Cut(e, "="); k != "MAKEFLAGS" && k != "MAKELEVEL" && k != "MFLAGS" && k != "MAKEOVERRIDES" {
			cmd.Env = append(cmd.Env, e)
		}
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s (%.0f s):\n%s", line, time.Since(start).Seconds(), tail(string(out), 20))
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return string(out)
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return string(out)
}

// repoRoot is the checkout this test runs in (internal/mkimage/push).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "Makefile")); err != nil {
		t.Fatalf("no checkout around the test: %v", err)
	}
	return root
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
