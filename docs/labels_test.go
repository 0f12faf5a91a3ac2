package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// labelPrefix is the one prefix of the project's labels (and the DRA
// driver's name).
const labelPrefix = "rdma-chain.github.io/"

// projectKey is a key under a prefix of the project's, as a word of code
// names it: rdma-chain/enabled, rdma-chain.github.io/smcr-allowed. A key
// after a dot or a slash, or followed by one, is some other name's part
// (test.rdma-chain/expect, ../rdma-chain/deploy, rdma-chain/deploy/examples).
var projectKey = regexp.MustCompile(`(?:^|[\s,(\x60"'\[{])(rdma-chain(?:\.[a-z0-9-]+)*/[a-z0-9][a-z0-9._-]*[a-z0-9])(?:[^/a-z0-9._-]|$)`)

// notLabels are keys of the project's prefix that pages name and that are
// no label, each with the file whose code defines it.
var notLabels = map[string]string{
	"rdma-chain.github.io/rdma":           "pkg/dra/cdi.go",            // the CDI kind of the driver's devices
	"rdma-chain.github.io/config":         "pkg/config/claimconfig.go", // the CDI device annotation of a claim's configuration
	"rdma-chain.github.io/port-down":      "pkg/dra/health.go",         // a device taint
	"rdma-chain.github.io/gid-table-full": "pkg/dra/health.go",         // a device taint
}

// kubectlLabel is a `kubectl label node|namespace NAME KEY=VALUE...`
// command; labelColumns a `-L KEY,KEY` list.
var (
	kubectlLabel = regexp.MustCompile(`kubectl label (?:nodes?|namespaces?|ns)\s+(.*)`)
	labelColumns = regexp.MustCompile(`(?:-L|--label-columns)[ =](\S+)`)
)

// TestLabels checks that every label a page names is one the manifests
// of deploy/ use (a node affinity's key, the admission policy's
// namespace label): the project's own keys wherever a page names them,
// and every key a `kubectl label` command sets or a `-L` list shows.
// Every key of the project's the manifests use is under labelPrefix, or
// an old name that releases.md says is kept for one release.
func TestLabels(t *testing.T) {
	used := manifestLabels(t)
	checked := 0
	for _, p := range pages(t) {
		problems, n := labelProblems(p, used)
		checked += n
		for _, msg := range problems {
			t.Error(msg)
		}
	}
	t.Logf("%d label names checked against %v", checked, used)
	if checked < 10 {
		t.Errorf("only %d label names found: the pages' parsing is broken", checked)
	}
	releases, err := os.ReadFile("releases.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range used {
		if strings.HasPrefix(k, "rdma-chain") && !strings.HasPrefix(k, labelPrefix) &&
			!regexp.MustCompile("(?m)^.*`"+regexp.QuoteMeta(k)+"`.*kept for one release").Match(releases) {
			t.Errorf("the manifests use %s, which is not under %s and which releases.md does not say is kept for one release", k, labelPrefix)
		}
	}
	for key, file := range notLabels {
		if data, err := os.ReadFile("../" + file); err != nil || !strings.Contains(string(data), `"/`+strings.TrimPrefix(key, labelPrefix)+`"`) {
			t.Errorf("%s, which pages may name as no label, is not in %s (%v)", key, file, err)
		}
	}
}

// labelProblems says which labels p names that no manifest uses, and how
// many it checked.
func labelProblems(p page, used []string) ([]string, int) {
	var out []string
	n := 0
	check := func(key, how string) {
		n++
		if !slices.Contains(used, key) {
			out = append(out, fmt.Sprintf("%s %s %s, a label no manifest of deploy/ uses (%v)", p.name, how, key, used))
		}
	}
	for _, text := range p.codeTexts() {
		for _, m := range projectKey.FindAllStringSubmatch(text, -1) {
			if _, ok := notLabels[m[1]]; !ok {
				check(m[1], "names")
			}
		}
		for _, m := range kubectlLabel.FindAllStringSubmatch(text, -1) {
			for _, w := range strings.Fields(m[1])[1:] {
				if key, _, ok := strings.Cut(w, "="); ok && strings.Contains(key, "/") && !strings.HasPrefix(key, "rdma-chain") {
					check(key, "sets")
				}
			}
		}
		for _, m := range labelColumns.FindAllStringSubmatch(text, -1) {
			for _, key := range strings.Split(m[1], ",") {
				if !strings.HasPrefix(key, "rdma-chain") {
					check(key, "shows")
				}
			}
		}
	}
	return out, n
}

// labelKey is a prefixed key in a manifest: a node selector's key, or a
// label key the admission policy's CEL reads in quotes.
var labelKey = regexp.MustCompile(`(?:key: |')([a-z0-9.-]+\.[a-z]+/[a-z0-9][a-z0-9._-]*|rdma-chain/[a-z0-9-]+)`)

// manifestLabels are the label keys the YAML of deploy/ uses outside its
// comments, sorted.
func manifestLabels(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir("../deploy", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, m := range labelKey.FindAllStringSubmatch(line, -1) {
				if !slices.Contains(out, m[1]) {
					out = append(out, m[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	if len(out) < 3 {
		t.Fatalf("read only %v from deploy/'s manifests: the parsing is broken", out)
	}
	return out
}
