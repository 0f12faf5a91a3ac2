package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocCommentsStartWithName checks that the doc comment of every
// top-level declaration of the tree's Go files, tests included, starts
// with the declared name and goes on as a sentence ("ErrX means ...", not
// "ErrX: ..."), and that no struct field's doc comment starts "Field:".
// Generated files are left out.
func TestDocCommentsStartWithName(t *testing.T) {
	fset := token.NewFileSet()
	files, checked := 0, 0
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != ".." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		files++
		for _, doc := range documented(f) {
			checked++
			if !startsWithName(doc.name, doc.group.Text()) {
				first, _, _ := strings.Cut(doc.group.Text(), "\n")
				t.Errorf("%s: the doc comment of %s does not start with its name and a sentence: %q",
					fset.Position(doc.group.Pos()), doc.name, first)
			}
		}
		for _, doc := range colonFields(f) {
			first, _, _ := strings.Cut(doc.group.Text(), "\n")
			t.Errorf("%s: the doc comment of field %s starts with its name and a colon: %q",
				fset.Position(doc.group.Pos()), doc.name, first)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 300 || checked < 2500 {
		t.Fatalf("read %d files and %d doc comments: the walk missed the tree", files, checked)
	}
}

// namedDoc is a doc comment and the one name it documents.
type namedDoc struct {
	name  string
	group *ast.CommentGroup
}

// documented lists f's top-level doc comments that document one name: a
// function or method, or one type, constant or variable (a comment over a
// group of several may speak of them together).
func documented(f *ast.File) []namedDoc {
	var out []namedDoc
	add := func(name *ast.Ident, doc *ast.CommentGroup) {
		if doc != nil && name.Name != "_" {
			out = append(out, namedDoc{name.Name, doc})
		}
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			add(d.Name, d.Doc)
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				doc := specDoc(spec)
				if d.Lparen == 0 {
					doc = d.Doc
				}
				switch s := spec.(type) {
				case *ast.TypeSpec:
					add(s.Name, doc)
				case *ast.ValueSpec:
					if len(s.Names) == 1 {
						add(s.Names[0], doc)
					}
				}
			}
		}
	}
	return out
}

// colonFields lists f's struct fields whose doc comment starts with the
// field's name and a colon, a label where a sentence belongs.
func colonFields(f *ast.File) []namedDoc {
	var out []namedDoc
	ast.Inspect(f, func(n ast.Node) bool {
		if st, ok := n.(*ast.StructType); ok {
			for _, field := range st.Fields.List {
				for _, name := range field.Names {
					if field.Doc != nil && strings.HasPrefix(field.Doc.Text(), name.Name+":") {
						out = append(out, namedDoc{name.Name, field.Doc})
					}
				}
			}
		}
		return true
	})
	return out
}

// specDoc returns the doc comment of a type or value spec.
func specDoc(spec ast.Spec) *ast.CommentGroup {
	switch s := spec.(type) {
	case *ast.TypeSpec:
		return s.Doc
	case *ast.ValueSpec:
		return s.Doc
	}
	return nil
}

// startsWithName reports whether text starts with name followed by a
// word, a comma or a possessive: not by a colon.
func startsWithName(name, text string) bool {
	rest, ok := strings.CutPrefix(text, name)
	return ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "\n") ||
		strings.HasPrefix(rest, ",") || strings.HasPrefix(rest, "'s "))
}
