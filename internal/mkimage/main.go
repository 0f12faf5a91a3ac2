// Command mkimage writes the node component's OCI image: the static binaries
// at /, nothing else (no shell, no libc), as an OCI image layout (oci-layout,
// index.json, blobs/) packed into one tar that `ctr images import` loads and
// a registry push (skopeo copy oci-archive:, crane push) takes as it is.
//
//	mkimage --out FILE --name REPO --tag T [--tag T]... --version V \
//	        [--created RFC3339] [--revision SHA] BINARY...
//	mkimage ... --platform linux/amd64=DIR --platform linux/arm64=DIR NAME...
//
// Without --platform the BINARY paths make one linux/amd64 image. With it,
// each platform's image holds the NAMEs from its DIR, and the tags name an
// OCI image index of them (what registries and runtimes pick a platform
// from). Every binary must be a static ELF of its platform's architecture.
//
// The image is reproducible: file times, the config's creation time and the
// history come from --created (make passes the commit time), every file is
// owned by 0:0 with mode 0755, so the same binaries give the same digest.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// spec is what one image holds and is called.
type spec struct {
	Name      string   // repository, e.g. localhost/rdma-chain
	Tags      []string // each becomes a reference in index.json
	Version   string
	Revision  string
	Created   time.Time
	Entry     string     // the entrypoint, one of the binaries' /NAME
	Platforms []platform // one image each; several make an image index
	Tree      string     // optional: a directory whose tree the layer holds too (test images)
}

// platform is one image of the index: its binaries, built for Arch.
type platform struct {
	OS, Arch string
	Binaries []string // host paths; each lands at /BASENAME
}

// machines are the ELF machines of the architectures the image is built for.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var sp spec
	var tags, platforms stringList
	out := flag.String("out", "", "the OCI archive to write (a tar of the OCI image layout)")
	flag.StringVar(&sp.Name, "name", "", "image repository, e.g. localhost/rdma-chain")
	flag.Var(&tags, "tag", "a tag of the image (repeatable)")
	flag.StringVar(&sp.Version, "version", "", "the version label")
	flag.StringVar(&sp.Revision, "revision", "", "the source revision label")
	flag.StringVar(&sp.Entry, "entrypoint", "", "the image's entrypoint, e.g. /rdma-chain-ops")
	flag.StringVar(&sp.Tree, "tree", "", "also put this directory's tree into the image (for test images)")
	flag.Var(&platforms, "platform", "OS/ARCH=DIR: an image of the named binaries from DIR (repeatable; several make an index)")
	created := flag.String("created", "", "creation time, RFC 3339 [the Unix epoch]")
	flag.Parse()
	sp.Tags = tags
	var err error
	if sp.Platforms, err = parsePlatforms(platforms, flag.Args()); err != nil {
		fail(err)
	}
	if *created != "" {
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			fail(fmt.Errorf("--created: %w", err))
		}
		sp.Created = t.UTC()
	} else {
		sp.Created = time.Unix(0, 0).UTC()
	}
	if *out == "" || sp.Name == "" || len(sp.Tags) == 0 || sp.Version == "" || flag.NArg() == 0 || sp.Entry == "" {
		fmt.Fprintln(os.Stderr, "usage: mkimage --out FILE --name REPO --tag T... --version V --entrypoint /NAME [--created T] [--revision R] [--platform OS/ARCH=DIR]... BINARY...")
		os.Exit(2)
	}
	digest, err := build(sp, *out)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s %s@%s\n", *out, sp.Name, digest)
}

// parsePlatforms reads the --platform values; without any, the arguments
// are the paths of one linux/amd64 image's binaries.
func parsePlatforms(values, args []string) ([]platform, error) {
	if len(values) == 0 {
		return []platform{{OS: "linux", Arch: "amd64", Binaries: args}}, nil
	}
	var ps []platform
	for _, v := range values {
		osArch, dir, ok := strings.Cut(v, "=")
		goos, arch, ok2 := strings.Cut(osArch, "/")
		if !ok || !ok2 || goos != "linux" || dir == "" {
			return nil, fmt.Errorf("--platform %q: want linux/ARCH=DIR", v)
		}
		p := platform{OS: goos, Arch: arch}
		for _, name := range args {
			if strings.Contains(name, "/") {
				return nil, fmt.Errorf("with --platform, %q must be a name in each platform's DIR", name)
			}
			p.Binaries = append(p.Binaries, filepath.Join(dir, name))
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mkimage:", err)
	os.Exit(1)
}

// build writes the archive to out and returns the digest the tags name:
// the image's manifest, or with several platforms the image index's.
func build(sp spec, out string) (v1.Hash, error) {
	if len(sp.Platforms) == 0 {
		return v1.Hash{}, errors.New("no platform")
	}
	var top interface{ Digest() (v1.Hash, error) }
	var err error
	if len(sp.Platforms) == 1 {
		top, err = image(sp, sp.Platforms[0])
	} else {
		top, err = index(sp)
	}
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := top.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	dir, err := os.MkdirTemp(filepath.Dir(out), ".mkimage-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	for _, tag := range sp.Tags {
		ann := layout.WithAnnotations(map[string]string{
			// The OCI name of the reference, and the one containerd's
			// import names the image by.
			"org.opencontainers.image.ref.name": tag,
			"io.containerd.image.name":          sp.Name + ":" + tag,
		})
		switch t := top.(type) {
		case v1.Image:
			err = p.AppendImage(t, ann)
		case v1.ImageIndex:
			err = p.AppendIndex(t, ann)
		}
		if err != nil {
			return v1.Hash{}, err
		}
	}
	if err := tarDir(dir, out, sp.Created); err != nil {
		return v1.Hash{}, err
	}
	return digest, nil
}

// index is the OCI image index of one image per platform, labelled as
// each image is.
func index(sp spec) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, pl := range sp.Platforms {
		img, err := image(sp, pl)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &v1.Platform{OS: pl.OS, Architecture: pl.Arch},
		}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return mutate.Annotations(idx, labels(sp)).(v1.ImageIndex), nil
}

// image is the one-layer image of a platform's binaries.
func image(sp spec, pl platform) (v1.Image, error) {
	layerTar, err := filesTar(sp.Tree, pl, sp.Created)
	if err != nil {
		return nil, err
	}
	inTree := false
	if sp.Tree != "" {
		_, err := os.Lstat(filepath.Join(sp.Tree, sp.Entry))
		inTree = err == nil
	}
	if !inTree && !slices.ContainsFunc(pl.Binaries, func(b string) bool { return "/"+filepath.Base(b) == sp.Entry }) {
		return nil, fmt.Errorf("entrypoint %s is none of the binaries", sp.Entry)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: sp.Created}, CreatedBy: "make image", Comment: "static binaries"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = pl.Arch, pl.OS
	cf.Created = v1.Time{Time: sp.Created}
	cf.Config.Labels = labels(sp)
	cf.Config.Entrypoint = []string{sp.Entry}
	cf.Config.Env = []string{"PATH=/"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels(sp)).(v1.Image), nil
}

// labels are the OCI image labels, set on the config and the manifest.
func labels(sp spec) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "rdma-chain",
		"org.opencontainers.image.description": "rdma-chain, a chained CNI plugin that gives Kubernetes pods RDMA: the plugin, its SMC socket hook loader and the operator commands",
		"org.opencontainers.image.version":     sp.Version,
		"org.opencontainers.image.created":     sp.Created.Format(time.RFC3339),
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	if sp.Revision != "" {
		l["org.opencontainers.image.revision"] = sp.Revision
	}
	return l
}

// filesTar is a tar of the tree (if any), then the platform's binaries at
// /, owned by root, the binaries mode 0755, all stamped with t, in name
// order.
func filesTar(tree string, pl platform, t time.Time) ([]byte, error) {
	sorted := append([]string(nil), pl.Binaries...)
	sort.Slice(sorted, func(i, j int) bool { return filepath.Base(sorted[i]) < filepath.Base(sorted[j]) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if tree != "" {
		if err := addTree(tw, tree, t); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{}
	for _, p := range sorted {
		name := filepath.Base(p)
		if seen[name] {
			return nil, fmt.Errorf("two binaries named %s", name)
		}
		seen[name] = true
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if err := isStaticELF(p, data, pl.Arch); err != nil {
			return nil, err
		}
		hdr := &tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), ModTime: t, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// addTree writes the directories, regular files and symlinks under dir, as
// they are but owned by root and stamped with t.
func addTree(tw *tar.Writer, dir string, t time.Time) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(st.Mode().Perm()), ModTime: t, Format: tar.FormatPAX}
		switch {
		case st.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		case st.Mode()&fs.ModeSymlink != 0:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case st.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size()
		default:
			return fmt.Errorf("%s: not a file, directory or symlink", p)
		}
		return writeEntry(tw, hdr, p)
	})
}

// writeEntry writes hdr and, for a regular file, the contents of p.
func writeEntry(tw *tar.Writer, hdr *tar.Header, p string) error {
	if err := tw.WriteHeader(hdr); err != nil || hdr.Typeflag != tar.TypeReg {
		return err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	_, err = tw.Write(data)
	return err
}

// isStaticELF refuses a binary that is not an ELF of arch's machine, or
// that needs a dynamic loader: the image has none.
func isStaticELF(path string, data []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s is not an ELF binary: %w", path, err)
	}
	want, ok := machines[arch]
	if !ok {
		return fmt.Errorf("%s: no ELF machine known for architecture %q", path, arch)
	}
	if f.Machine != want {
		return fmt.Errorf("%s is an ELF for %v, not for %s (%v)", path, f.Machine, arch, want)
	}
	if slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) ||
		bytes.Contains(data, []byte("/lib64/ld-linux")) || bytes.Contains(data, []byte("/lib/ld-linux")) {
		return fmt.Errorf("%s is dynamically linked (build with CGO_ENABLED=0)", path)
	}
	return nil
}

// tarDir packs the layout directory dir into out, entries sorted, times
// set to t, written to a temporary file and renamed.
func tarDir(dir, out string, t time.Time) error {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	f, err := os.CreateTemp(filepath.Dir(out), ".mkimage-*.tar")
	if err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }() // gone after the rename
	tw := tar.NewWriter(f)
	for _, p := range files {
		if err := addFile(tw, dir, p, t); err != nil {
			f.Close()
			return err
		}
	}
	err = errors.Join(tw.Close(), f.Close())
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), out)
}

func addFile(tw *tar.Writer, dir, p string, t time.Time) error {
	st, err := os.Lstat(p)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return err
	}
	hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: t, Format: tar.FormatPAX}
	switch {
	case st.IsDir():
		hdr.Typeflag, hdr.Mode, hdr.Name = tar.TypeDir, 0o755, hdr.Name+"/"
		return tw.WriteHeader(hdr)
	case st.Mode().IsRegular():
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, st.Size()
	default:
		return fmt.Errorf("%s: not a file or directory", p)
	}
	return writeEntry(tw, hdr, p)
}
