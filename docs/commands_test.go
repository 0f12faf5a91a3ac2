package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestCommandLines checks that every `rdma-chain-ops COMMAND --flag...` a
// page gives (in a code span or a code block, synopses included) names a
// command the binary has, and each flag after it is one of that command's
// (its --help); every `rdma-chain-dra --flag...` names the driver's flags.
func TestCommandLines(t *testing.T) {
	ops := opsCommands(t)
	dra := draFlags(t)
	checked := 0
	for _, p := range pages(t) {
		problems, n := commandProblems(p, ops, dra)
		checked += n
		for _, msg := range problems {
			t.Error(msg)
		}
	}
	t.Logf("%d rdma-chain-ops and rdma-chain-dra command lines checked", checked)
	if checked < 20 {
		t.Errorf("only %d command lines found: the pages' parsing is broken", checked)
	}
}

// commandProblems says which command lines of p name a command or flag the
// binaries lack (ops: each command's flags; dra: the driver's), and how
// many it checked.
func commandProblems(p page, ops map[string]map[string]bool, dra map[string]bool) ([]string, int) {
	var out []string
	n := 0
	for _, text := range p.codeTexts() {
		for _, cl := range commandLines(text) {
			known := dra
			name := cl.binary
			if cl.binary == "rdma-chain-ops" {
				if cl.command == "" || cl.command == "--help" || cl.command == "--version" {
					continue
				}
				flags, ok := ops[cl.command]
				if !ok {
					out = append(out, fmt.Sprintf("%s gives `rdma-chain-ops %s`: no such command (%v)", p.name, cl.command, slices.Sorted(maps.Keys(ops))))
					continue
				}
				known, name = flags, "rdma-chain-ops "+cl.command
			}
			n++
			for _, f := range cl.flags {
				if f != "" && !known[f] {
					out = append(out, fmt.Sprintf("%s gives `%s --%s`: no such flag", p.name, name, f))
				}
			}
		}
	}
	return out, n
}

// TestCommandsListed checks that the pages that list the operator
// commands (the README's binaries, operations.md's count and its
// sections) list every command the binary has, and no other.
func TestCommandsListed(t *testing.T) {
	want := slices.Sorted(maps.Keys(opsCommands(t)))
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	lists := []struct{ where, re, text string }{
		{"README.md's binaries", `rdma-chain-ops\x60: the operator commands \(([^)]*)\)`, string(readme)},
		{"README.md's reading table", `\(docs/operations\.md\): ([a-z,\s]+);`, string(readme)},
		{"operations.md's command count", `commands: ([a-z,\s]+) \(\x60rdma-chain-ops --help\x60`, string(ops)},
	}
	for _, l := range lists {
		m := regexp.MustCompile(l.re).FindStringSubmatch(l.text)
		if m == nil {
			t.Errorf("%s: no list of the commands (%s)", l.where, l.re)
			continue
		}
		if got := listWords(m[1]); !slices.Equal(got, want) {
			t.Errorf("%s lists %v, the binary has %v", l.where, got, want)
		}
	}
	var sections []string
	for _, m := range regexp.MustCompile(`(?m)^### ([a-z]+): `).FindAllStringSubmatch(string(ops), -1) {
		sections = append(sections, m[1])
	}
	if slices.Sort(sections); !slices.Equal(sections, want) {
		t.Errorf("operations.md has sections for %v, the binary has %v", sections, want)
	}
}

// listWords are the words of an enumeration, "a, b and c", sorted.
func listWords(s string) []string {
	var out []string
	for _, w := range strings.Fields(strings.ReplaceAll(s, ",", " ")) {
		if w != "and" {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out
}

// commandLine is one command a page gives: the binary, its first word and
// the flags after it.
type commandLine struct {
	binary, command string
	flags           []string // names, without dashes or values
}

// shellEnd ends a command: a pipe, a list, a redirection or a comment (a
// "|" inside a synopsis's brackets is an alternative, not a pipe).
var shellEnd = map[string]bool{"|": true, "||": true, "&&": true, ";": true, "#": true, ">": true, "2>&1": true, "<": true}

// commandLines finds each rdma-chain binary's invocations in text.
func commandLines(text string) []commandLine {
	words := strings.Fields(text)
	var out []commandLine
	for i, w := range words {
		path := trimWord(w)
		bin := filepath.Base(path)
		if bin != "rdma-chain-ops" && bin != "rdma-chain-dra" || strings.HasSuffix(path, "/") { // cmd/rdma-chain-ops/: the folder
			continue
		}
		cl := commandLine{binary: bin}
		depth := 0
		for j, a := range words[i+1:] {
			if depth == 0 && (shellEnd[a] || strings.HasPrefix(a, "#")) {
				break
			}
			depth += strings.Count(a, "[") - strings.Count(a, "]")
			name := strings.TrimLeft(trimWord(a), "[")
			if j == 0 && !strings.HasPrefix(name, "-") {
				cl.command = name
				continue
			}
			if j == 0 {
				cl.command = ""
			}
			if f, ok := strings.CutPrefix(name, "--"); ok {
				f, _, _ = strings.Cut(f, "=")
				cl.flags = append(cl.flags, f)
			}
		}
		out = append(out, cl)
	}
	return out
}

var (
	opsOnce sync.Once
	opsCmds map[string]map[string]bool
	opsErr  string
)

// opsCommands builds this tree's rdma-chain-ops once and returns each of
// its commands (rdma-chain-ops --help) with the flags its --help lists
// (help always among them).
func opsCommands(t *testing.T) map[string]map[string]bool {
	t.Helper()
	opsOnce.Do(func() { opsCmds, opsErr = readOpsCommands() })
	if opsErr != "" {
		t.Fatal(opsErr)
	}
	return opsCmds
}

var (
	helpCommand = regexp.MustCompile(`(?m)^  ([a-z]+) {2,}\S`)
	helpFlag    = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)
)

func readOpsCommands() (map[string]map[string]bool, string) {
	dir, err := os.MkdirTemp("", "docs-ops-")
	if err != nil {
		return nil, err.Error()
	}
	bin := filepath.Join(dir, "rdma-chain-ops")
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	build := exec.Command(gobin, "build", "-trimpath", "-o", bin, "./cmd/rdma-chain-ops")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, "go build rdma-chain-ops: " + err.Error() + "\n" + string(out)
	}
	usage, err := exec.Command(bin, "--help").Output()
	if err != nil {
		return nil, "rdma-chain-ops --help: " + err.Error()
	}
	out := map[string]map[string]bool{}
	for _, m := range helpCommand.FindAllStringSubmatch(string(usage), -1) {
		help, err := exec.Command(bin, m[1], "--help").CombinedOutput()
		if err != nil {
			return nil, "rdma-chain-ops " + m[1] + " --help: " + err.Error() + "\n" + string(help)
		}
		flags := map[string]bool{"help": true}
		for _, f := range helpFlag.FindAllStringSubmatch(string(help), -1) {
			flags[f[1]] = true
		}
		out[m[1]] = flags
	}
	if len(out) == 0 {
		return nil, "rdma-chain-ops --help lists no command:\n" + string(usage)
	}
	return out, ""
}

// draFlags are the flags cmd/rdma-chain-dra defines on the command line's
// flag set: flag.Kind("name", ...) and flag.KindVar(&v, "name", ...).
func draFlags(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../cmd/rdma-chain-dra/main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{"help": true}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "flag" {
			return true
		}
		at := 0 // flag.String("name", ...), flag.Func("name", ...)
		if strings.HasSuffix(sel.Sel.Name, "Var") {
			at = 1 // flag.StringVar(&v, "name", ...), flag.Var(v, "name", ...)
		}
		if len(call.Args) <= at {
			return true
		}
		if lit, ok := call.Args[at].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if name, err := strconv.Unquote(lit.Value); err == nil {
				out[name] = true
			}
		}
		return true
	})
	if len(out) == 1 {
		t.Fatal("cmd/rdma-chain-dra/main.go defines no flag")
	}
	return out
}
