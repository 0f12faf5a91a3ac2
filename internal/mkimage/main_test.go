package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// fakeBinary writes a file that passes for a static amd64 ELF binary: an
// ELF header and body.
func fakeBinary(t *testing.T, dir, name, body string) string {
	return fakeELF(t, dir, name, elf.EM_X86_64, body)
}

// fakeELF writes an ELF64 executable header for machine (no program or
// section headers), then body.
func fakeELF(t *testing.T, dir, name string, machine elf.Machine, body string) string {
	t.Helper()
	h := make([]byte, 64)
	copy(h, "\x7fELF\x02\x01\x01")
	le := binary.LittleEndian
	le.PutUint16(h[16:], uint16(elf.ET_EXEC))
	le.PutUint16(h[18:], uint16(machine))
	le.PutUint32(h[20:], 1)
	le.PutUint16(h[52:], 64) // e_ehsize
	le.PutUint16(h[54:], 56) // e_phentsize
	le.PutUint16(h[58:], 64) // e_shentsize
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, append(h, body...), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func testSpec(t *testing.T) spec {
	dir := t.TempDir()
	return spec{
		Name: "localhost/rdma-chain", Tags: []string{"dev", "v1.2.3"}, Version: "v1.2.3", Revision: "abc123",
		Created: time.Date(2026, 11, 24, 5, 0, 0, 0, time.UTC), Entry: "/rdma-chain-ops",
		Platforms: []platform{{OS: "linux", Arch: "amd64", Binaries: []string{
			fakeBinary(t, dir, "rdma-chain", "plugin"), fakeBinary(t, dir, "rdma-chain-smc-hook", "hook"), fakeBinary(t, dir, "rdma-chain-ops", "ops"),
			fakeBinary(t, dir, "rdma-chain-dra", "dra")}}},
	}
}

// untar unpacks the archive into a new directory.
func untar(t *testing.T, archive string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("tar", "-xf", archive, "-C", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	return dir
}

// TestBuild reads the archive back with the OCI layout reader: one image
// under every tag, the labels, and a layer holding exactly the binaries.
func TestBuild(t *testing.T) {
	sp := testSpec(t)
	out := filepath.Join(t.TempDir(), "image.tar")
	digest, err := build(sp, out)
	if err != nil {
		t.Fatal(err)
	}
	dir := untar(t, out)
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(sp.Tags) {
		t.Fatalf("%d manifests in index.json, want %d", len(im.Manifests), len(sp.Tags))
	}
	for i, m := range im.Manifests {
		if m.Digest != digest || m.Annotations["org.opencontainers.image.ref.name"] != sp.Tags[i] ||
			m.Annotations["io.containerd.image.name"] != sp.Name+":"+sp.Tags[i] {
			t.Errorf("index entry %d: %v %v", i, m.Digest, m.Annotations)
		}
	}
	img, err := idx.Image(digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"org.opencontainers.image.version": "v1.2.3", "org.opencontainers.image.revision": "abc123", "org.opencontainers.image.created": "2026-11-24T05:00:00Z"} {
		if cf.Config.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], want)
		}
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || strings.Join(cf.Config.Entrypoint, " ") != "/rdma-chain-ops" {
		t.Errorf("config: %s/%s entrypoint %v", cf.OS, cf.Architecture, cf.Config.Entrypoint)
	}
	var names []string
	for _, f := range layerFiles(t, img) {
		h := f.Header
		names = append(names, h.Name)
		if h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(sp.Created) {
			t.Errorf("%s: mode %o owner %d:%d time %v", h.Name, h.Mode, h.Uid, h.Gid, h.ModTime)
		}
	}
	if got := strings.Join(names, " "); got != "rdma-chain rdma-chain-dra rdma-chain-ops rdma-chain-smc-hook" {
		t.Errorf("layer holds %q", got)
	}
}

// TestBuildReproducible checks that the same inputs give the same archive,
// byte for byte.
func TestBuildReproducible(t *testing.T) {
	sp := testSpec(t)
	var archives [2][]byte
	for i := range archives {
		out := filepath.Join(t.TempDir(), "image.tar")
		if _, err := build(sp, out); err != nil {
			t.Fatal(err)
		}
		archives[i], _ = os.ReadFile(out)
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Error("two builds of the same binaries differ")
	}
}

func TestBuildRefuses(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, sp *spec)
		want   string
	}{
		{"dynamic binary", func(t *testing.T, sp *spec) {
			sp.Platforms[0].Binaries[0] = fakeBinary(t, t.TempDir(), "rdma-chain", "\x00/lib64/ld-linux-x86-64.so.2\x00")
		}, "dynamically linked"},
		{"not ELF", func(t *testing.T, sp *spec) {
			p := filepath.Join(t.TempDir(), "script")
			_ = os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
			sp.Platforms[0].Binaries = append(sp.Platforms[0].Binaries, p)
		}, "not an ELF binary"},
		{"same name twice", func(t *testing.T, sp *spec) {
			sp.Platforms[0].Binaries = append(sp.Platforms[0].Binaries, fakeBinary(t, t.TempDir(), "rdma-chain", "other"))
		}, "two binaries named rdma-chain"},
		{"an arm64 binary in the amd64 image", func(t *testing.T, sp *spec) {
			sp.Platforms[0].Binaries[0] = fakeELF(t, t.TempDir(), "rdma-chain", elf.EM_AARCH64, "plugin")
		}, "not for amd64"},
		{"an amd64 binary in the arm64 image", func(t *testing.T, sp *spec) {
			sp.Platforms = append(sp.Platforms, platform{OS: "linux", Arch: "arm64", Binaries: sp.Platforms[0].Binaries})
		}, "not for arm64"},
		{"entrypoint not in the image", func(t *testing.T, sp *spec) { sp.Entry = "/bin/sh" }, "none of the binaries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := testSpec(t)
			tt.change(t, &sp)
			out := filepath.Join(t.TempDir(), "image.tar")
			if _, err := build(sp, out); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want %q", err, tt.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("archive written: %v", err)
			}
		})
	}
}

// TestBuildTree checks that a test image's tree goes in as it is (directories,
// files with their modes, symlinks), owned by root, and its entrypoint may be
// in it.
func TestBuildTree(t *testing.T) {
	tree := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tree, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	fakeBinary(t, filepath.Join(tree, "bin"), "busybox", "box")
	if err := os.Symlink("busybox", filepath.Join(tree, "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	sp := testSpec(t)
	sp.Tree, sp.Entry = tree, "/bin/sh"
	sp.Platforms[0].Binaries = sp.Platforms[0].Binaries[:1]
	layerTar, err := filesTar(sp.Tree, sp.Platforms[0], sp.Created)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(layerTar))
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.Name+" "+string(h.Typeflag)+" "+h.Linkname+" "+strconv.FormatInt(h.Mode, 8))
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d", h.Name, h.Uid, h.Gid)
		}
	}
	want := []string{"bin/ 5  755", "bin/busybox 0  700", "bin/sh 2 busybox 777", "rdma-chain 0  755"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("layer:\n%q\nwant\n%q", got, want)
	}
	if _, err := build(sp, filepath.Join(t.TempDir(), "image.tar")); err != nil {
		t.Errorf("entrypoint in the tree: %v", err)
	}
}

// layerFile is one entry of an image's only layer.
type layerFile struct {
	Header *tar.Header
	Data   []byte
}

// layerFiles reads the entries of img's single layer, in archive order.
func layerFiles(t *testing.T, img v1.Image) []layerFile {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var files []layerFile
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, layerFile{h, data})
	}
}
