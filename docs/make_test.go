package docs

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// makeRun is `make TARGET` in code, after optional VAR=value arguments.
var makeRun = regexp.MustCompile(`(?:^|[\s;&|(])make((?:\s+[A-Z_][A-Z0-9_]*=\S*)*)\s+([a-z][a-z0-9-]*)`)

// shellComment is a comment of a shell line, where make is a word of
// prose ("make sure").
var shellComment = regexp.MustCompile(`(?m)(?:^|\s)#.*$`)

// TestMakeTargets checks that every `make TARGET` a page gives is a
// target of the Makefile.
func TestMakeTargets(t *testing.T) {
	targets := makefileTargets(t)
	checked := 0
	for _, p := range pages(t) {
		problems, n := makeProblems(p, targets)
		checked += n
		for _, msg := range problems {
			t.Error(msg)
		}
	}
	t.Logf("%d make commands checked", checked)
	if checked < 20 {
		t.Errorf("only %d make commands found: the pages' parsing is broken", checked)
	}
}

// makeProblems says which `make TARGET` of p names no target of targets,
// and how many it checked.
func makeProblems(p page, targets map[string]bool) ([]string, int) {
	var out []string
	n := 0
	for _, text := range p.codeTexts() {
		for _, m := range makeRun.FindAllStringSubmatch(shellComment.ReplaceAllString(text, ""), -1) {
			n++
			if !targets[m[2]] {
				out = append(out, fmt.Sprintf("%s gives `make %s`: the Makefile has no target %s", p.name, m[2], m[2]))
			}
		}
	}
	return out, n
}

// makeRule is a rule's first line: its targets, a colon that is not an
// assignment's.
var makeRule = regexp.MustCompile(`^([A-Za-z0-9_.-]+(?:[ \t]+[A-Za-z0-9_.-]+)*)[ \t]*::?(?:[^=]|$)`)

// makefileTargets are the targets the Makefile's rules define.
func makefileTargets(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := makeRule.FindStringSubmatch(line); m != nil {
			for _, target := range strings.Fields(m[1]) {
				out[target] = true
			}
		}
	}
	if !out["build"] || !out["test"] {
		t.Fatalf("read no build or test target from the Makefile: %v", out)
	}
	return out
}
