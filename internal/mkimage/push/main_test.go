package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

// TestDestination checks that --to is refused unless it names a
// registry host and no digest; the tag defaults to --default-tag.
func TestDestination(t *testing.T) {
	cases := []struct {
		dest, want, err string
	}{
		{"registry.example.com/rdma/rdma-chain", "registry.example.com/rdma/rdma-chain:v0.3.0", ""},
		{"registry.example.com/rdma/rdma-chain:prod", "registry.example.com/rdma/rdma-chain:prod", ""},
		{"127.0.0.1:5000/rdma-chain", "127.0.0.1:5000/rdma-chain:v0.3.0", ""},
		{"localhost/rdma-chain:x", "localhost/rdma-chain:x", ""},
		{"rdma/rdma-chain", "", "no registry host"},
		{"rdma-chain", "", "no registry host"},
		{"registry.example.com/rdma-chain@sha256:" + strings.Repeat("0", 64), "", "names a digest"},
		{"registry.example.com/Rdma-Chain", "", "repository"},
		{"registry.example.com/rdma-chain:", "", "tag"},
	}
	for _, c := range cases {
		t.Run(c.dest, func(t *testing.T) {
			tag, err := destination(c.dest, "v0.3.0")
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("destination(%q) = %v, %v; want an error saying %q", c.dest, tag, err, c.err)
				}
				return
			}
			if err != nil || tag.Name() != c.want {
				t.Fatalf("destination(%q) = %v, %v; want %s", c.dest, tag, err, c.want)
			}
		})
	}
}

// tarEntry is one entry of a test archive.
type tarEntry struct {
	name string
	kind byte
	data string
}

func writeTar(t *testing.T, entries []tarEntry) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.kind, Mode: 0o644, Size: int64(len(e.data))}
		if e.kind == tar.TypeSymlink {
			hdr.Size, hdr.Linkname = 0, e.data
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if e.kind == tar.TypeReg {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "a.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUnpackLayout checks that only an OCI image layout's files and
// folders unpack; anything else in the archive refuses it whole.
func TestUnpackLayout(t *testing.T) {
	blob := "blobs/sha256/" + strings.Repeat("a", 64)
	layout := []tarEntry{{"blobs/", tar.TypeDir, ""}, {"blobs/sha256/", tar.TypeDir, ""}, {blob, tar.TypeReg, "x"},
		{"index.json", tar.TypeReg, "{}"}, {"oci-layout", tar.TypeReg, `{"imageLayoutVersion":"1.0.0"}`}}
	cases := []struct {
		name    string
		entries []tarEntry
		err     string
	}{
		{"layout", layout, ""},
		{"no index", layout[:3], "not an OCI archive"},
		{"outside", append(layout[:5:5], tarEntry{"../index.json", tar.TypeReg, "{}"}), "not a file of an OCI image layout"},
		{"absolute", append(layout[:5:5], tarEntry{"/etc/passwd", tar.TypeReg, ""}), "not a file of an OCI image layout"},
		{"other file", append(layout[:5:5], tarEntry{"blobs/sha256/x", tar.TypeReg, ""}), "not a file of an OCI image layout"},
		{"symlink", []tarEntry{{"index.json", tar.TypeSymlink, "/etc/passwd"}}, "neither a file nor a folder"},
		{"twice", append(layout[:5:5], tarEntry{"index.json", tar.TypeReg, "{}"}), "or twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			err := unpackLayout(writeTar(t, c.entries), dir)
			if c.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if data, err := os.ReadFile(filepath.Join(dir, blob)); err != nil || string(data) != "x" {
					t.Fatalf("%s: %q, %v", blob, data, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("unpackLayout: %v, want an error saying %q", err, c.err)
			}
		})
	}
}

// TestEntry checks that the entry named by its reference is found as an
// index or an image, with its digest; another name is refused with the
// names there are.
func TestEntry(t *testing.T) {
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := random.Index(64, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameKey: "dev"})); err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{refNameKey: "one"})); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		ref  string
		want interface{ Digest() (v1.Hash, error) }
		err  string
	}{
		{"dev", idx, ""},
		{"one", img, ""},
		{"v1", nil, `no image or index named "v1" (it names ["dev" "one"])`},
	}
	for _, c := range cases {
		t.Run(c.ref, func(t *testing.T) {
			got, err := entry(dir, c.ref)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("entry: %v, want an error saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gd, _ := got.Digest()
			wd, _ := c.want.Digest()
			if gd != wd {
				t.Fatalf("entry %s has digest %s, want %s", c.ref, gd, wd)
			}
		})
	}
}
