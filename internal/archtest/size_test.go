package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Limits on the shape of non-test Go code: one concern per file, one step
// per function. Table-driven data is exempt where listed below.
const (
	maxFileLines = 600
	maxFuncLines = 100
)

// exempt lists files or functions (file:Func) that are mostly data: tables
// whose length is their content, not their logic.
var exempt = map[string]string{}

// debt lists files or functions (file:Func) still over a limit, with their
// size when recorded: a ratchet. Such an entry fails the test when it grows,
// and when it is back within the limit (then delete the entry).
var debt = map[string]int{}

// TestSizes fails for every non-test file over maxFileLines and every
// function over maxFuncLines, naming each with its size.
func TestSizes(t *testing.T) {
	root := repoRoot(t)
	var problems []string
	for _, p := range goFiles(t, root) {
		rel, _ := filepath.Rel(root, p)
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if p := check(rel, strings.Count(string(src), "\n"), maxFileLines); p != "" {
			problems = append(problems, p)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			name := fn.Name.Name
			if fn.Recv != nil && len(fn.Recv.List) == 1 {
				name = recvName(fn.Recv.List[0].Type) + "." + name
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if p := check(rel+":"+name, n, maxFuncLines); p != "" {
				problems = append(problems, p)
			}
		}
	}
	slices.Sort(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// check says what is wrong with what (a file, or file:Func) being n lines
// long, or "" when nothing is.
func check(what string, n, limit int) string {
	if exempt[what] != "" {
		return ""
	}
	if was, ok := debt[what]; ok {
		switch {
		case n <= limit:
			return fmt.Sprintf("%s: %d lines, within the limit of %d: delete its debt entry", what, n, limit)
		case n > was:
			return fmt.Sprintf("%s: %d lines, grown from %d (limit %d)", what, n, was, limit)
		}
		return ""
	}
	if n > limit {
		return fmt.Sprintf("%s: %d lines (limit %d)", what, n, limit)
	}
	return ""
}

func recvName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvName(x.X)
	case *ast.IndexExpr:
		return recvName(x.X)
	case *ast.IndexListExpr:
		return recvName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "?"
}
