package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	archive := flag.String("archive", "", "the OCI archive make image wrote")
	refName := flag.String("ref-name", "", "the archive's reference to push (its org.opencontainers.image.ref.name)")
	to := flag.String("to", "", "where to push: HOST/REPO[:TAG]")
	defaultTag := flag.String("default-tag", "", "the tag when --to names none")
	flag.Parse()
	if *archive == "" || *refName == "" || *to == "" || *defaultTag == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: push --archive FILE --ref-name NAME --to HOST/REPO[:TAG] --default-tag TAG")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ref, digest, err := push(ctx, *archive, *refName, *to, *defaultTag)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "push:", err)
		os.Exit(1)
	}
	fmt.Printf("%s@%s\n", ref.Name(), digest) // Name, not String: the tag even where --to named none
}

// push writes the archive's entry refName to the tag dest names and
// returns the tag and the digest the registry holds for it.
func push(ctx context.Context, archive, refName, dest, defaultTag string) (name.Tag, v1.Hash, error) {
	tag, err := destination(dest, defaultTag)
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	dir, err := os.MkdirTemp("", "rdma-chain-push-")
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := unpackLayout(archive, dir); err != nil {
		return name.Tag{}, v1.Hash{}, fmt.Errorf("%s: %w", archive, err)
	}
	top, err := entry(dir, refName)
	if err != nil {
		return name.Tag{}, v1.Hash{}, fmt.Errorf("%s: %w", archive, err)
	}
	want, err := top.Digest()
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	switch t := top.(type) {
	case v1.ImageIndex:
		err = remote.WriteIndex(tag, t, opts...)
	case v1.Image:
		err = remote.Write(tag, t, opts...)
	}
	if err != nil {
		return name.Tag{}, v1.Hash{}, fmt.Errorf("pushing to %s: %w", tag, err)
	}
	got, err := remote.Head(tag, opts...)
	if err != nil {
		return name.Tag{}, v1.Hash{}, fmt.Errorf("reading %s back: %w", tag, err)
	}
	if got.Digest != want {
		return name.Tag{}, v1.Hash{}, fmt.Errorf("%s names %s after the push, not the archive's %s", tag, got.Digest, want)
	}
	return tag, want, nil
}

// destination is the tag dest names, defaultTag if it names none. It must
// name its registry's host (a first element with a dot or a port, or
// localhost, as Docker tells a host from a Docker Hub user); a reference by
// digest is refused.
func destination(dest, defaultTag string) (name.Tag, error) {
	if strings.Contains(dest, "@") {
		return name.Tag{}, fmt.Errorf("--to %q names a digest: give HOST/REPO[:TAG]", dest)
	}
	host, _, ok := strings.Cut(dest, "/")
	if !ok || !strings.ContainsAny(host, ".:") && host != "localhost" {
		return name.Tag{}, fmt.Errorf("--to %q names no registry host: give HOST/REPO[:TAG]", dest)
	}
	tag, err := name.NewTag(dest, name.WithDefaultTag(defaultTag))
	if err != nil {
		return name.Tag{}, fmt.Errorf("--to %q: %w", dest, err)
	}
	return tag, nil
}
