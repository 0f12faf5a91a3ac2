// Package docs holds the tests that keep the documentation true to the
// tree.
package docs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDesignLayout checks that the Layout block of design.md names every
// Go package directory of cmd, plugins, pkg and internal and every
// first-level directory of integration, and every directory it names
// exists.
func TestDesignLayout(t *testing.T) {
	doc, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := layoutEntries(t, string(doc))
	for _, dir := range listed {
		if st, err := os.Stat(filepath.Join("..", dir)); err != nil || !st.IsDir() {
			t.Errorf("design.md's layout names %s, which is not a directory of the tree", dir)
		}
	}
	for _, dir := range treeUnits(t) {
		if !slices.Contains(listed, dir) {
			t.Errorf("design.md's layout does not name %s/", dir)
		}
	}
}

// layoutEntries returns the directories the Layout block's lines start
// with (continuation lines start with spaces).
func layoutEntries(t *testing.T, doc string) []string {
	_, section, ok := strings.Cut(doc, "\n## Layout\n")
	if !ok {
		t.Fatal("design.md has no Layout section")
	}
	blocks := strings.Split(section, "```")
	if len(blocks) < 3 {
		t.Fatal("design.md's Layout section has no code block")
	}
	var out []string
	for _, line := range strings.Split(blocks[1], "\n") {
		if line == "" || line[0] == ' ' {
			continue
		}
		first := strings.Fields(line)[0]
		if !strings.HasSuffix(first, "/") {
			t.Errorf("layout line %q does not start with a directory", line)
			continue
		}
		out = append(out, strings.TrimSuffix(first, "/"))
	}
	return out
}

// treeUnits are the directories the layout must name.
func treeUnits(t *testing.T) []string {
	var out []string
	for _, top := range []string{"cmd", "plugins", "pkg", "internal"} {
		err := filepath.WalkDir(filepath.Join("..", top), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(p, ".go") {
				dir, _ := filepath.Rel("..", filepath.Dir(p))
				if !slices.Contains(out, dir) {
					out = append(out, dir)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(filepath.Join("..", "integration"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, "integration/"+e.Name())
		}
	}
	return out
}

// maxLine is the longest line a page may hold: a table row or paragraph
// past it is more than a reader takes in at once, and is split instead.
const maxLine = 1500

// TestLineLength checks that no line of README.md or docs/*.md is longer
// than maxLine characters.
func TestLineLength(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range append(pages, "../README.md") {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if n := len([]rune(line)); n > maxLine {
				t.Errorf("%s:%d is %d characters, more than %d: split it", page, i+1, n, maxLine)
			}
		}
	}
}
