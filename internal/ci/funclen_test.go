package ci

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function may be, from its func line to its closing brace,
// outside tests and the demo: a reader takes one in at a sitting.
const maxFuncLines = 60

// longFuncsAllowed are the folders whose functions may be longer: the demo's program tells one
// story top to bottom, and reads best in one piece.
var longFuncsAllowed = []string{"demo/"}

// TestNoLongFunctions: no function of the repository's Go code (every module's, generated files,
// tests and testdata aside) is longer than maxFuncLines; a longer one is split along its ideas.
func TestNoLongFunctions(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		if d.IsDir() && path != root && (d.Name() == "bin" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || allowedLong(rel) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		if ast.IsGenerated(f) {
			return nil
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			if lines := end.Line - start.Line + 1; lines > maxFuncLines {
				t.Errorf("%s:%d: %s is %d lines, over %d: split it along its ideas", rel, start.Line, funcName(fn), lines, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files under %s: the walk is out of date", files, root)
	}
}

func allowedLong(rel string) bool {
	for _, dir := range longFuncsAllowed {
		if strings.HasPrefix(rel, dir) {
			return true
		}
	}
	return false
}

// funcName is fn's name as a reader looks for it: Type.Method for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	switch generic := typ.(type) {
	case *ast.IndexExpr:
		typ = generic.X
	case *ast.IndexListExpr:
		typ = generic.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
