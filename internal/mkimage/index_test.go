package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// crossBuild compiles a small static Go program for linux/arch into
// dir/name, as make image cross-compiles the binaries.
func crossBuild(t *testing.T, dir, name, arch string) {
	t.Helper()
	src := t.TempDir()
	for f, body := range map[string]string{
		"go.mod":  "module hello\n\ngo 1.26\n",
		"main.go": "package main\n\nimport \"os\"\n\nfunc main() { os.Exit(0) }\n",
	} {
		if err := os.WriteFile(filepath.Join(src, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	cmd := exec.Command(gobin, "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, name), ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOARCH=%s go build: %v\n%s", arch, err, out)
	}
}

// TestBuildIndex checks that with linux/amd64 and linux/arm64 the tags
// name one OCI image index whose manifests carry their platforms; each
// image's config says the same platform and the version; each image's
// files are ELF binaries of its architecture (aarch64 for arm64),
// cross-compiled.
func TestBuildIndex(t *testing.T) {
	names := []string{"rdma-chain", "rdma-chain-ops"}
	root := t.TempDir()
	var values []string
	for _, arch := range []string{"amd64", "arm64"} {
		dir := filepath.Join(root, "linux-"+arch)
		for _, n := range names {
			crossBuild(t, dir, n, arch)
		}
		values = append(values, "linux/"+arch+"="+dir)
	}
	sp := testSpec(t)
	var err error
	if sp.Platforms, err = parsePlatforms(values, names); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	digest, err := build(sp, out)
	if err != nil {
		t.Fatal(err)
	}
	top, err := layout.ImageIndexFromPath(untar(t, out))
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != len(sp.Tags) {
		t.Fatalf("index.json: %d entries, want one per tag", len(tm.Manifests))
	}
	for i, d := range tm.Manifests {
		if d.Digest != digest || d.MediaType != types.OCIImageIndex || d.Annotations["org.opencontainers.image.ref.name"] != sp.Tags[i] {
			t.Errorf("index.json entry %d: %s %s %v, want the image index %s", i, d.MediaType, d.Digest, d.Annotations, digest)
		}
	}
	idx, err := top.ImageIndex(digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || im.Annotations["org.opencontainers.image.version"] != sp.Version {
		t.Errorf("image index: %s, annotations %v", im.MediaType, im.Annotations)
	}
	var platforms []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkPlatformImage(t, img, d.Platform, sp.Version, names)
	}
	if got := strings.Join(platforms, " "); got != "linux/amd64 linux/arm64" {
		t.Errorf("platforms %q", got)
	}
}

// checkPlatformImage checks the config's platform and version label,
// and the layer's binaries, each an ELF of the platform's machine.
func checkPlatformImage(t *testing.T, img v1.Image, p *v1.Platform, version string, names []string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture || cf.Config.Labels["org.opencontainers.image.version"] != version {
		t.Errorf("%s config: %s/%s labels %v", p.Architecture, cf.OS, cf.Architecture, cf.Config.Labels)
	}
	var got []string
	for _, lf := range layerFiles(t, img) {
		f, err := elf.NewFile(bytes.NewReader(lf.Data))
		if err != nil {
			t.Fatalf("%s/%s: %v", p.Architecture, lf.Header.Name, err)
		}
		if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]; f.Machine != want {
			t.Errorf("%s/%s is an ELF for %v", p.Architecture, lf.Header.Name, f.Machine)
		}
		got = append(got, lf.Header.Name)
	}
	if strings.Join(got, " ") != strings.Join(names, " ") {
		t.Errorf("%s layer holds %q", p.Architecture, got)
	}
}
