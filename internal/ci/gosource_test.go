package ci

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// A run is one program a source runs, and where.
type run struct {
	program string
	where   string
}

// A wrapper is a function that runs the program one of its parameters names: exec.Command(name,
// …), or `ip netns exec NS name …`. Calls of it with a literal there run that program.
type wrapper struct {
	param    int
	variadic bool // the program is the first of the variadic parameter's values
}

// goRuns reads every Go file under root (test files too) and returns the programs they run:
// the literal programs of exec.Command and exec.CommandContext, of calls to functions that pass
// a parameter on to them (found to a fixed point, unexported ones within their folder), of
// `ip netns exec NS PROGRAM`, of `sh -c SCRIPT`, and the tools named to exec.LookPath and to the
// Require functions. Programs named by variables (a binary the test built) are not programs of
// a package, and are left out.
func goRuns(root string) ([]run, error) {
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "bin" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s := &scan{fset: fset, root: root, wrappers: map[string]wrapper{}}
	for changed := true; changed; {
		changed = false
		for _, f := range files {
			changed = s.file(f, false) || changed
		}
	}
	for _, f := range files {
		s.file(f, true)
	}
	return s.runs, nil
}

type scan struct {
	fset     *token.FileSet
	root     string
	wrappers map[string]wrapper // by name; unexported ones keyed by folder too
	runs     []run
}

// file looks at every function of f: collecting, it records the programs run; otherwise it
// finds wrappers, and says whether it found a new one.
func (s *scan) file(f *ast.File, collecting bool) bool {
	dir := filepath.Dir(s.fset.Position(f.Pos()).Filename)
	changed := false
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		params := paramsOf(fn)
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				seq := s.programArgs(dir, n, params)
				if seq == nil {
					break
				}
				if w, ok := s.wrapperOf(seq); ok && !collecting {
					key := wrapperKey(dir, fn.Name.Name)
					if _, known := s.wrappers[key]; !known {
						s.wrappers[key] = w
						changed = true
					}
				}
				if collecting {
					s.record(n, seq)
				}
			case *ast.RangeStmt:
				if collecting {
					s.lookedUp(n)
				}
			}
			return true
		})
	}
	return changed
}

func wrapperKey(dir, name string) string {
	if ast.IsExported(name) {
		return name
	}
	return dir + "." + name
}

// A tok is one argument of a command line: a literal, a parameter of the enclosing function
// (param ≥ 0), or something else.
type tok struct {
	lit      string
	isLit    bool
	param    int
	variadic bool
}

type param struct {
	index    int
	variadic bool
}

func paramsOf(fn *ast.FuncDecl) map[string]param {
	ps := map[string]param{}
	i := 0
	for _, field := range fn.Type.Params.List {
		_, variadic := field.Type.(*ast.Ellipsis)
		for _, name := range field.Names {
			ps[name.Name] = param{i, variadic}
			i++
		}
		if len(field.Names) == 0 {
			i++
		}
	}
	return ps
}

// programArgs returns the command line a call runs, or nil when it runs none.
func (s *scan) programArgs(dir string, call *ast.CallExpr, params map[string]param) []tok {
	name := calleeName(call)
	from := -1
	switch {
	case name == "exec.Command":
		from = 0
	case name == "exec.CommandContext":
		from = 1
	case name == "exec.LookPath" || strings.HasSuffix(name, "Require"):
		from = 0
	default:
		short := name[strings.LastIndex(name, ".")+1:]
		w, ok := s.wrappers[wrapperKey(dir, short)]
		if !ok {
			return nil
		}
		from = w.param
	}
	if from >= len(call.Args) {
		return nil
	}
	var seq []tok
	for i, a := range call.Args[from:] {
		seq = append(seq, flatten(a, params, call.Ellipsis.IsValid() && from+i == len(call.Args)-1)...)
	}
	if strings.HasSuffix(name, "Require") || name == "exec.LookPath" {
		return keepLiterals(seq)
	}
	return seq
}

func calleeName(call *ast.CallExpr) string {
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		return fn.Name
	case *ast.SelectorExpr:
		if x, ok := fn.X.(*ast.Ident); ok {
			return x.Name + "." + fn.Sel.Name
		}
		return "?." + fn.Sel.Name
	}
	return ""
}

// flatten turns an argument into its words: literals, string slices, append and
// parameters (spread is the argument followed by "...").
func flatten(e ast.Expr, params map[string]param, spread bool) []tok {
	switch e := e.(type) {
	case *ast.BasicLit:
		if v, err := strconv.Unquote(e.Value); err == nil && e.Kind == token.STRING {
			return []tok{{lit: v, isLit: true, param: -1}}
		}
	case *ast.BinaryExpr:
		if l, ok := e.X.(*ast.BasicLit); ok && e.Op == token.ADD && l.Kind == token.STRING {
			v, _ := strconv.Unquote(l.Value)
			return []tok{{lit: v + "*", isLit: true, param: -1}}
		}
	case *ast.Ident:
		if p, ok := params[e.Name]; ok && (!p.variadic || spread) {
			return []tok{{param: p.index, variadic: p.variadic}}
		}
	case *ast.CompositeLit:
		var out []tok
		for _, elt := range e.Elts {
			out = append(out, flatten(elt, params, false)...)
		}
		return out
	case *ast.CallExpr:
		if id, ok := e.Fun.(*ast.Ident); ok && id.Name == "append" {
			var out []tok
			for i, a := range e.Args {
				out = append(out, flatten(a, params, e.Ellipsis.IsValid() && i == len(e.Args)-1)...)
			}
			return out
		}
	}
	return []tok{{param: -1}}
}

func keepLiterals(seq []tok) []tok {
	var out []tok
	for _, t := range seq {
		if t.isLit && programName(t.lit) {
			out = append(out, t, tok{param: -1}) // each one a program of its own
		}
	}
	if out == nil {
		return []tok{}
	}
	return out
}

// commandOf follows `ip netns exec NS …` to the program it runs.
func commandOf(seq []tok) []tok {
	for len(seq) >= 5 && seq[0].lit == "ip" && seq[1].lit == "netns" && seq[2].lit == "exec" {
		seq = seq[4:]
	}
	return seq
}

func (s *scan) wrapperOf(seq []tok) (wrapper, bool) {
	seq = commandOf(seq)
	if len(seq) == 0 || seq[0].param < 0 {
		return wrapper{}, false
	}
	return wrapper{param: seq[0].param, variadic: seq[0].variadic}, true
}

func (s *scan) record(call *ast.CallExpr, seq []tok) {
	where := s.where(call.Pos())
	if name := calleeName(call); strings.HasSuffix(name, "Require") || name == "exec.LookPath" {
		for _, t := range seq {
			if t.isLit {
				s.runs = append(s.runs, run{t.lit, where})
			}
		}
		return
	}
	for _, words := range [][]tok{seq, commandOf(seq)} {
		if len(words) == 0 || !words[0].isLit {
			continue
		}
		s.runs = append(s.runs, run{words[0].lit, where})
		if (words[0].lit == "sh" || words[0].lit == "bash") && len(words) > 2 && words[1].lit == "-c" && words[2].isLit {
			for _, p := range scriptPrograms(words[2].lit) {
				s.runs = append(s.runs, run{p, where})
			}
		}
	}
}

// lookedUp records the tools of `for _, tool := range []string{…} { … exec.LookPath(tool) … }`.
func (s *scan) lookedUp(r *ast.RangeStmt) {
	list, ok := r.X.(*ast.CompositeLit)
	v, isIdent := r.Value.(*ast.Ident)
	if !ok || !isIdent {
		return
	}
	looks := false
	ast.Inspect(r.Body, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok && calleeName(c) == "exec.LookPath" && len(c.Args) == 1 {
			if id, ok := c.Args[0].(*ast.Ident); ok && id.Name == v.Name {
				looks = true
			}
		}
		return true
	})
	if !looks {
		return
	}
	for _, elt := range list.Elts {
		if lit, ok := elt.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			p, _ := strconv.Unquote(lit.Value)
			s.runs = append(s.runs, run{p, s.where(lit.Pos())})
		}
	}
}

func (s *scan) where(p token.Pos) string {
	pos := s.fset.Position(p)
	rel, err := filepath.Rel(s.root, pos.Filename)
	if err != nil {
		rel = pos.Filename
	}
	return rel + ":" + strconv.Itoa(pos.Line)
}

// programName says whether a word can be a program's name (not a message or a flag).
func programName(w string) bool {
	if w == "" || strings.ContainsAny(w, " =:") || strings.HasPrefix(w, "-") {
		return false
	}
	return true
}
