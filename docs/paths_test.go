package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestRepoPaths checks that every path of the repository a page names, as a
// code span, a word of code or a relative link, exists. A path is a word
// whose first element is a tracked top-level folder (deploy/dra,
// pkg/chain/del.go); an upper-case placeholder (install-set-MODE.json)
// matches any name, "..." ends a path at its folder, and pkg/smc.Detect
// names the package pkg/smc.
func TestRepoPaths(t *testing.T) {
	tops := trackedTopDirs(t)
	checked := 0
	for _, p := range pages(t) {
		problems, n := pathProblems(p, tops)
		checked += n
		for _, msg := range problems {
			t.Error(msg)
		}
	}
	comments, n := deployCommentProblems(t, tops)
	checked += n
	for _, msg := range comments {
		t.Error(msg)
	}
	t.Logf("%d repository paths and links checked", checked)
	if checked < 100 {
		t.Errorf("only %d paths found: the pages' parsing is broken", checked)
	}
}

// pathProblems says which paths and links of p name nothing in the
// repository, and how many it checked.
func pathProblems(p page, tops []string) ([]string, int) {
	var out []string
	n := 0
	for _, text := range p.codeTexts() {
		for _, w := range strings.Fields(text) {
			path := trimWord(w)
			first, _, ok := strings.Cut(path, "/")
			if !ok || !slices.Contains(tops, first) {
				continue
			}
			n++
			if !repoPathExists(path) {
				out = append(out, fmt.Sprintf("%s names %s, which the repository does not have", p.name, path))
			}
		}
	}
	for _, link := range p.links {
		if strings.Contains(link, "://") || strings.HasPrefix(link, "#") || strings.HasPrefix(link, "mailto:") {
			continue
		}
		n++
		target, _, _ := strings.Cut(link, "#")
		if _, err := os.Stat(filepath.Join("..", p.dir, target)); err != nil {
			out = append(out, fmt.Sprintf("%s links to %s, which the repository does not have", p.name, link))
		}
	}
	return out, n
}

// trimWord strips the punctuation and quoting around a word of code or
// prose: `[../deploy/dra]`, `deploy/dra,`, `"pkg/state"`.
func trimWord(w string) string {
	w = strings.TrimLeft(w, `([{"'`)
	w = strings.TrimSuffix(strings.TrimRight(w, `)]},;:."`), "'s")
	return strings.TrimRight(w, `)]},;:."'`)
}

// trackedTopDirs are the repository's top-level folders, without hidden
// ones and those .gitignore names (bin/: what make build writes).
func trackedTopDirs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	ignore, err := os.ReadFile("../.gitignore")
	if err != nil {
		t.Fatal(err)
	}
	ignored := map[string]bool{}
	for _, line := range strings.Split(string(ignore), "\n") {
		ignored[strings.Trim(strings.TrimSpace(line), "/")] = true
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !ignored[e.Name()] {
			out = append(out, e.Name())
		}
	}
	return out
}

var placeholder = regexp.MustCompile(`[A-Z][A-Z0-9_]+`)

// repoPathExists reports whether path, relative to the repository's root,
// names something there (see TestRepoPaths for the forms).
func repoPathExists(path string) bool {
	if i := strings.Index(path, "..."); i >= 0 {
		path = path[:i]
	}
	if i := strings.Index(path, "…"); i >= 0 {
		path = path[:i]
	}
	root := filepath.Join("..", filepath.FromSlash(path))
	if _, err := os.Stat(root); err == nil {
		return true
	}
	if m, _ := filepath.Glob(placeholder.ReplaceAllString(root, "*")); len(m) > 0 {
		return true
	}
	// A Go identifier after a package's folder: pkg/smc.Detect.
	dir, base := filepath.Split(root)
	if pkg, ident, ok := strings.Cut(base, "."); ok && ident != "" && unicode.IsUpper(rune(ident[0])) && !strings.ContainsAny(ident, "./") {
		if st, err := os.Stat(filepath.Join(dir, pkg)); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}

// deployCommentProblems checks the paths the whole-line comments of
// deploy/'s YAML files name, as pathProblems does a page's.
func deployCommentProblems(t *testing.T, tops []string) ([]string, int) {
	t.Helper()
	var out []string
	n := 0
	err := filepath.WalkDir("../deploy", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		p := page{name: strings.TrimPrefix(path, "../")}
		for _, line := range strings.Split(string(data), "\n") {
			if comment, ok := strings.CutPrefix(strings.TrimSpace(line), "#"); ok { // whole-line comments: prose
				p.code = append(p.code, comment)
			}
		}
		problems, m := pathProblems(p, tops)
		out, n = append(out, problems...), n+m
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, n
}
