package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// page is one Markdown page of the tree, split into what the checks read.
type page struct {
	name   string   // as a reader finds it: README.md, docs/install.md
	dir    string   // the folder its relative links start from
	spans  []string // inline code spans, line breaks as spaces
	code   []string // the lines of fenced code blocks, continuations joined
	blocks []string // each fenced code block whole
	links  []string // the targets of Markdown links
}

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// pages reads README.md and docs/*.md.
func pages(t *testing.T) []page {
	t.Helper()
	names, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []page
	for _, n := range append([]string{"../README.md"}, names...) {
		data, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		name, dir := "docs/"+n, "docs"
		if n == "../README.md" {
			name, dir = "README.md", "."
		}
		out = append(out, parsePage(name, dir, string(data)))
	}
	return out
}

// parsePage splits a page into its fenced code (a line ending in a
// backslash is joined with the next, as a shell does) and its prose, whose
// code spans may wrap across lines.
func parsePage(name, dir, doc string) page {
	p := page{name: name, dir: dir}
	var prose, block []string
	fenced, cont := false, ""
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if fenced {
				p.blocks = append(p.blocks, strings.Join(block, "\n"))
			}
			fenced, cont, block = !fenced, "", nil
			continue
		}
		if !fenced {
			prose = append(prose, line)
			continue
		}
		block = append(block, line)
		if l, ok := strings.CutSuffix(line, `\`); ok {
			cont += l + " "
			continue
		}
		p.code = append(p.code, cont+line)
		cont = ""
	}
	text := strings.Join(prose, "\n")
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		p.spans = append(p.spans, strings.Join(strings.Fields(m[1]), " "))
	}
	for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(text, ""), -1) {
		p.links = append(p.links, m[1])
	}
	return p
}

// codeTexts are the spans and code lines of p: everything a reader would
// type or copy.
func (p page) codeTexts() []string {
	return append(append([]string{}, p.spans...), p.code...)
}
