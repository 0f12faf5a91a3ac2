package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// makeVar reads a variable's value as the Makefile sets it (VAR := v or
// VAR ?= v).
func makeVar(t *testing.T, makefile, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` [:?]?= *(.*)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("the Makefile sets no %s", name)
	}
	return strings.TrimSpace(m[1])
}

// TestImageBinaries checks that the base DaemonSet's header, which says
// what the image holds, names every binary make image packs
// (IMAGE_BINARIES).
func TestImageBinaries(t *testing.T) {
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := os.ReadFile("../deploy/base/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(string(ds), "\napiVersion:")
	header = strings.Join(strings.Fields(strings.ReplaceAll(header, "#", " ")), " ")
	for _, bin := range strings.Fields(makeVar(t, string(makefile), "IMAGE_BINARIES")) {
		if !regexp.MustCompile(`/` + regexp.QuoteMeta(bin) + `\b[^-]`).MatchString(header) {
			t.Errorf("deploy/base/daemonset.yaml's header does not name /%s, which make image packs", bin)
		}
	}
}

// ociArchive is an oci-archive: reference to make image's archive, with
// the reference name after it if any.
var ociArchive = regexp.MustCompile(`oci-archive:bin/rdma-chain-image\.tar(?::(\S+))?`)

// TestOCIArchiveRef checks that make image's archive names its index once
// per --tag, so a tool reading it (skopeo's oci-archive:PATH:REF) must be
// given one of them: every command of the pages that reads the archive
// names the default IMAGE_TAG or a placeholder.
func TestOCIArchiveRef(t *testing.T) {
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	_, recipe, ok := strings.Cut(string(makefile), "\nimage: ")
	if !ok {
		t.Fatal("the Makefile has no image target")
	}
	recipe, _, _ = strings.Cut(recipe, "\n\n")
	if n := strings.Count(recipe, "--tag "); n < 2 {
		t.Skipf("make image gives the archive %d tag: no reference needed", n)
	}
	tag := makeVar(t, string(makefile), "IMAGE_TAG")
	found := 0
	for _, p := range pages(t) {
		for _, text := range p.codeTexts() {
			for _, m := range ociArchive.FindAllStringSubmatch(text, -1) {
				found++
				if m[1] != tag && !placeholder.MatchString(m[1]) {
					t.Errorf("%s reads %s: the archive holds several references (the tags of make image), name one (%s:%s)", p.name, m[0], m[0], tag)
				}
			}
		}
	}
	if found == 0 {
		t.Error("no page says how to push the archive (oci-archive:bin/rdma-chain-image.tar)")
	}
}
