package breaker_test

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
)

// maxSurface bounds what an application imports (docs/design.md §6): the exported names
// of packages breaker, observe and registry together.
const maxSurface = 80

// surfacePackages are the packages an application imports, by directory.
var surfacePackages = []struct{ name, dir string }{
	{"breaker", "."},
	{"observe", "observe"},
	{"registry", "registry"},
}

// exportedNames lists what go doc shows of the package in dir, counted as docs/design.md
// §6 counts: every exported package-level name, and every exported method of an exported
// type, the methods an alias to a type of internal/circuit brings included (State.String);
// an interface's methods are part of its name and are not counted again.
func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	own, ownMethods := declarations(t, dir)
	_, circuitMethods := declarations(t, "internal/circuit")
	var names []string
	for name, alias := range own {
		names = append(names, name)
		if alias == "" {
			for _, m := range ownMethods[name] {
				names = append(names, name+"."+m)
			}
		} else {
			for _, m := range circuitMethods[alias] {
				names = append(names, name+"."+m)
			}
		}
	}
	slices.Sort(names)
	return names
}

// declarations returns the exported package-level names of the package in dir (for an
// alias of a type of another package, that type's name; else "") and the exported methods
// declared on each of its types.
func declarations(t *testing.T, dir string) (names map[string]string, methods map[string][]string) {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	names, methods = map[string]string{}, map[string][]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				switch {
				case !d.Name.IsExported():
				case d.Recv == nil:
					names[d.Name.Name] = ""
				default:
					recv := d.Recv.List[0].Type
					if s, ok := recv.(*ast.StarExpr); ok {
						recv = s.X
					}
					switch r := recv.(type) {
					case *ast.IndexExpr:
						recv = r.X
					case *ast.IndexListExpr:
						recv = r.X
					}
					rn := recv.(*ast.Ident).Name
					methods[rn] = append(methods[rn], d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						names[s.Name.Name] = ""
						if sel, ok := s.Type.(*ast.SelectorExpr); ok && s.Assign.IsValid() {
							names[s.Name.Name] = sel.Sel.Name
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names[n.Name] = ""
							}
						}
					}
				}
			}
		}
	}
	return names, methods
}

// TestSurface holds breaker, observe and registry to maxSurface exported names together,
// and docs/design.md §6 to the list of them: a name added or removed is a name the design
// lists or stops listing.
func TestSurface(t *testing.T) {
	total := 0
	exported := make([][]string, len(surfacePackages))
	for i, p := range surfacePackages {
		exported[i] = exportedNames(t, p.dir)
		total += len(exported[i])
	}
	if total > maxSurface {
		t.Errorf("breaker, observe and registry export %d names together, more than %d (docs/design.md §6)", total, maxSurface)
	}
	t.Logf("breaker, observe and registry export %d names together", total)

	doc, err := os.ReadFile("../../docs/design.md")
	if os.IsNotExist(err) {
		t.Skip("SKIPPED: no docs/design.md two directories up (this module outside its repository): its list of the names is not checked")
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range surfacePackages {
		got := exported[i]
		// "- `breaker` (52): `Breaker`, `Breaker.Adopt`, ..." in §6.
		line := regexp.MustCompile("(?m)^- `" + p.name + "` \\((\\d+)\\): (.*)$").FindSubmatch(doc)
		if line == nil {
			t.Errorf("docs/design.md §6 lists no names of %s; it exports %d: %s", p.name, len(got), strings.Join(got, ", "))
			continue
		}
		var listed []string
		for _, m := range regexp.MustCompile("`([A-Za-z.]+)`").FindAllSubmatch(line[2], -1) {
			listed = append(listed, string(m[1]))
		}
		slices.Sort(listed)
		if !slices.Equal(listed, got) || string(line[1]) != strconv.Itoa(len(got)) {
			t.Errorf("docs/design.md §6 lists %s names of %s: %s\nit exports %d: %s", line[1], p.name, strings.Join(listed, ", "), len(got), strings.Join(got, ", "))
		}
	}
}
