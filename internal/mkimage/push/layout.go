package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// refNameKey is the OCI annotation that names an entry of a layout's
// index.json.
const refNameKey = "org.opencontainers.image.ref.name"

// layoutFile matches the names an OCI image layout holds: its two files,
// the blobs folders and blobs by digest.
var layoutFile = regexp.MustCompile(`^(oci-layout|index\.json|blobs/?|blobs/sha256/?|blobs/sha256/[0-9a-f]{64})$`)

// maxLayoutBytes bounds what an archive may unpack to.
const maxLayoutBytes = 4 << 30

// unpackLayout unpacks the OCI archive at archive into dir: only the files
// and folders of an OCI image layout, regular files and folders only, each
// name once, at most maxLayoutBytes in all.
func unpackLayout(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	seen := map[string]bool{}
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the tar: %w", err)
		}
		clean := path.Clean(hdr.Name)
		if !layoutFile.MatchString(hdr.Name) || seen[clean] {
			return fmt.Errorf("entry %q: not a file of an OCI image layout, or twice", hdr.Name)
		}
		seen[clean] = true
		target := filepath.Join(dir, filepath.FromSlash(clean))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			if total += hdr.Size; total > maxLayoutBytes {
				return fmt.Errorf("the layout is larger than %d bytes", maxLayoutBytes)
			}
			err = writeFile(target, tr, hdr.Size)
		default:
			return fmt.Errorf("entry %q: neither a file nor a folder", hdr.Name)
		}
		if err != nil {
			return err
		}
	}
	if !seen["index.json"] || !seen["oci-layout"] {
		return errors.New("no oci-layout or index.json: not an OCI archive")
	}
	return nil
}

// writeFile creates path (never over an existing file) with the size bytes
// of r.
func writeFile(target string, r io.Reader, size int64) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, io.LimitReader(r, size))
	if err = errors.Join(err, out.Close()); err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("%s: %d of %d bytes", target, n, size)
	}
	return nil
}

// entry is the image index, or the image, that the layout in dir names by
// refName (the registry checks every blob against its digest on upload).
func entry(dir, refName string) (interface{ Digest() (v1.Hash, error) }, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range im.Manifests {
		if d.Annotations[refNameKey] != refName {
			names = append(names, d.Annotations[refNameKey])
			continue
		}
		switch d.MediaType {
		case types.OCIImageIndex, types.DockerManifestList:
			return top.ImageIndex(d.Digest)
		case types.OCIManifestSchema1, types.DockerManifestSchema2:
			return top.Image(d.Digest)
		default:
			return nil, fmt.Errorf("%s names a %s, neither an image nor an index", refName, d.MediaType)
		}
	}
	return nil, fmt.Errorf("no image or index named %q (it names %q)", refName, names)
}
