package testutil_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/testutil"
)

// TestNoProcessCountsInParallelTests: a test that reads the process's
// allocation counts (runtime.ReadMemStats, testing.AllocsPerRun) must not
// be parallel: the tests running beside it allocate too, and on a loaded
// machine they push it past its bound (CI failed so once). Such a test
// runs in a package's sequential phase, before the parallel tests start.
func TestNoProcessCountsInParallelTests(t *testing.T) {
	t.Parallel() // it reads files, and counts nothing
	root := testutil.RepoRoot(t)
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != root) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			checked++
			parallel, counts := false, ""
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "Parallel":
					parallel = true
				case "ReadMemStats", "AllocsPerRun":
					if x, ok := sel.X.(*ast.Ident); ok && (x.Name == "runtime" || x.Name == "testing") {
						counts = x.Name + "." + sel.Sel.Name
					}
				}
				return true
			})
			if parallel && counts != "" {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s: %s is parallel and reads %s", rel, fn.Name.Name, counts)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d tests found under %s", checked, root)
	}
}
