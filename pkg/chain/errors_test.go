package chain

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestDocumentedErrorTable checks that the error table of
// docs/configuration.md lists exactly the codes in Codes.
func TestDocumentedErrorTable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "## CNI error codes")
	if !ok {
		t.Fatal("docs/configuration.md has no CNI error codes section")
	}
	table, _, _ = strings.Cut(table, "\n\n\n")
	var documented []uint
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \|`).FindAllStringSubmatch(table, -1) {
		n, _ := strconv.Atoi(m[1])
		documented = append(documented, uint(n))
	}
	want := slices.Clone(Codes)
	slices.Sort(want)
	slices.Sort(documented)
	if !slices.Equal(documented, want) {
		t.Errorf("docs/configuration.md documents codes %v, the plugin returns %v", documented, want)
	}
}

// libraryCodes maps the CNI library's code names to their values.
var libraryCodes = map[string]uint{
	"ErrUnknown": types.ErrUnknown, "ErrIncompatibleCNIVersion": types.ErrIncompatibleCNIVersion,
	"ErrUnsupportedField": types.ErrUnsupportedField, "ErrUnknownContainer": types.ErrUnknownContainer,
	"ErrInvalidEnvironmentVariables": types.ErrInvalidEnvironmentVariables, "ErrIOFailure": types.ErrIOFailure,
	"ErrDecodingFailure": types.ErrDecodingFailure, "ErrInvalidNetworkConfig": types.ErrInvalidNetworkConfig,
	"ErrInvalidNetNS": types.ErrInvalidNetNS, "ErrTryAgainLater": types.ErrTryAgainLater, "ErrInternal": types.ErrInternal,
}

// TestCodesCoverTheCode checks that every types.Err* the plugin's packages
// name in non-test code is in Codes.
func TestCodesCoverTheCode(t *testing.T) {
	for _, dir := range []string{"pkg/chain", "pkg/config"} {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "types" {
					if code, ok := libraryCodes[sel.Sel.Name]; ok && !slices.Contains(Codes, code) {
						t.Errorf("%s: types.%s (code %d) is returned but not in Codes/docs", fset.Position(sel.Pos()), sel.Sel.Name, code)
					}
				}
				return true
			})
		}
	}
}
