// Package modules checks what importing Fusebox's library modules costs an application:
// it builds the module graph of a scratch application module against the modules of this
// tree, the way a user's `go get` would see them once they are tagged.
package modules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	core = "github.com/fusebox-dev/fusebox/pkg/breaker"
	kube = "github.com/fusebox-dev/fusebox/pkg/breaker/kube"
	// The version at which modules of this tree require their untagged siblings (go.work
	// maps it to their directories), and at which a scratch module requires them.
	unpublished = "v0.0.0-00010101000000-000000000000"
)

// repoRoot is where the root module (the operator) and go.work live.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("no go.work at the repository root: %v", err)
	}
	return root
}

// goCmd runs the go command in dir. GOFLAGS=-mod=mod lets it resolve what a scratch
// module's go.mod does not yet list; GOPROXY and the module cache come from the
// environment.
func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return stdout.String()
}

// scratchGraph writes an application module that imports pkgs, requiring each of mods at
// the unpublished version and replacing it with its directory in this tree (in the scratch
// module only: replace directives of dependencies are ignored, as a user's would be), and
// returns the paths in its module graph (`go list -m all`) after `go mod tidy`.
func scratchGraph(t *testing.T, mods, pkgs []string) []string {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	var gomod strings.Builder
	gomod.WriteString("module example.com/scratch\n\ngo 1.26.0\n\nrequire (\n")
	for _, m := range mods {
		fmt.Fprintf(&gomod, "\t%s %s\n", m, unpublished)
	}
	gomod.WriteString(")\n\nreplace (\n")
	for _, m := range mods {
		fmt.Fprintf(&gomod, "\t%s => %s\n", m, filepath.Join(root, strings.TrimPrefix(m, "github.com/fusebox-dev/fusebox/")))
	}
	gomod.WriteString(")\n")
	var main strings.Builder
	main.WriteString("package main\n\nimport (\n")
	for _, p := range pkgs {
		fmt.Fprintf(&main, "\t_ %q\n", p)
	}
	main.WriteString(")\n\nfunc main() {}\n")
	for name, data := range map[string]string{"go.mod": gomod.String(), "main.go": main.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// GOWORK=off: the scratch module lives outside this tree, but say it anyway.
	env := []string{"GOWORK=off", "GOFLAGS=-mod=mod"}
	goCmd(t, dir, env, "mod", "tidy")
	graph := strings.Fields(goCmd(t, dir, env, "list", "-m", "-f", "{{.Path}}", "all"))
	t.Logf("%d modules in the graph of an application importing %s:\n%s", len(graph), strings.Join(pkgs, ", "), strings.Join(graph, "\n"))
	return graph
}

// TestCoreCostsNothing: an application that imports the breaker and its HTTP middleware
// gets Fusebox's core module and nothing else.
func TestCoreCostsNothing(t *testing.T) {
	graph := scratchGraph(t, []string{core}, []string{core, core + "/httpbreaker"})
	if want := []string{"example.com/scratch", core}; !slices.Equal(graph, want) {
		t.Errorf("module graph %v, want exactly %v: the core module must require nothing", graph, want)
	}
}

// heavy reports whether a module path is one an importer of the kube adapter must not get:
// the operator module, its controller-runtime, the other adapters' Redis and OpenTelemetry.
func heavy(m string) bool {
	return m == "github.com/fusebox-dev/fusebox" ||
		m == "sigs.k8s.io/controller-runtime" ||
		strings.HasPrefix(m, "github.com/redis/go-redis/") ||
		strings.HasPrefix(m, "go.opentelemetry.io/")
}

// operatorTests lists the test files of pkg/breaker/kube that import the operator module
// (api/v1alpha1, internal/testenv) or controller-runtime. Because go mod tidy loads the
// tests of the packages an application imports, each of them would put its imports into
// every importer's module graph (and, while the operator is unpublished, break the
// importer's tidy).
func operatorTests(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "pkg", "breaker", "kube", "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, f := range files {
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if (strings.HasPrefix(path, "github.com/fusebox-dev/fusebox/") && !strings.HasPrefix(path, core+"/") && path != core) ||
				strings.HasPrefix(path, "sigs.k8s.io/controller-runtime/") {
				found = append(found, filepath.Base(f))
				break
			}
		}
	}
	return found
}

// TestKubeCostsNoOperator: an application that imports the kube adapter gets client-go,
// but not the operator's controller-runtime, nor the other adapters' Redis or
// OpenTelemetry, nor the operator module itself.
func TestKubeCostsNoOperator(t *testing.T) {
	var gomod struct {
		Require []struct{ Path string }
	}
	out := goCmd(t, filepath.Join(repoRoot(t), "pkg", "breaker", "kube"), []string{"GOWORK=off"}, "mod", "edit", "-json")
	if err := json.Unmarshal([]byte(out), &gomod); err != nil {
		t.Fatal(err)
	}
	for _, r := range gomod.Require {
		if heavy(r.Path) {
			t.Errorf("pkg/breaker/kube/go.mod requires %s", r.Path)
		}
	}

	if files := operatorTests(t); len(files) > 0 {
		t.Fatalf("pkg/breaker/kube's tests import the operator or controller-runtime (%s), which would put them in "+
			"every importer's module graph: tests that need the operator or envtest live in test/kube", strings.Join(files, ", "))
	}
	graph := scratchGraph(t, []string{core, kube}, []string{kube})
	for _, m := range graph {
		if heavy(m) {
			t.Errorf("%s is in the module graph of an application importing only %s", m, kube)
		}
	}
	if !slices.Contains(graph, "k8s.io/client-go") {
		t.Errorf("k8s.io/client-go missing from the graph: is this check still looking at %s?", kube)
	}
}

// TestWorkspaceBuildsTheReleasedOperator: `make test` builds in workspace mode (go.work),
// where minimal version selection runs over the requirements of every workspace module.
// If an adapter or bench required a newer version of something the operator uses, the
// workspace would test the operator against that version while a release (GOWORK=off)
// builds it against its own go.mod. Every module providing a package to the operator's
// packages or tests must be selected at the version the root go.mod requires.
func TestWorkspaceBuildsTheReleasedOperator(t *testing.T) {
	root := repoRoot(t)
	var gomod struct {
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal([]byte(goCmd(t, root, nil, "mod", "edit", "-json")), &gomod); err != nil {
		t.Fatal(err)
	}
	required := map[string]string{}
	for _, r := range gomod.Require {
		required[r.Path] = r.Version
	}

	type module struct {
		Path, Version string
		Main          bool
		Replace       *module
	}
	out := goCmd(t, root, nil, "list", "-deps", "-test", "-json=Module", "./...")
	seen := map[string]bool{}
	for dec := json.NewDecoder(strings.NewReader(out)); ; {
		var p struct{ Module *module }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		m := p.Module
		if m == nil || m.Main || seen[m.Path] {
			continue // the standard library, or a workspace module
		}
		seen[m.Path] = true
		want, ok := required[m.Path]
		switch {
		case !ok:
			t.Errorf("%s %s provides packages to the operator but the root go.mod does not require it", m.Path, m.Version)
		case m.Version != want:
			t.Errorf("the workspace selects %s %s, the root go.mod requires %s: another workspace module raises it", m.Path, m.Version, want)
		case m.Replace != nil && (m.Replace.Path != m.Path || m.Replace.Version != m.Version):
			// hack/tools pins Kubernetes' staging modules to their release, which the
			// workspace then applies to every module: a replacement by the very version
			// required is what a release selects anyway.
			t.Errorf("the workspace replaces %s %s with %s %s: a release would not", m.Path, m.Version, m.Replace.Path, m.Replace.Version)
		}
	}
	if len(seen) == 0 {
		t.Fatal("no dependency module found: is the operator's package list empty?")
	}
}

// TestModulesAreTidy: in workspace mode the go command resolves an import from any
// workspace module's requirements, so a module whose go.mod lacks a requirement still
// builds here and breaks only for its users. Each module must be tidy on its own
// (GOWORK=off), with the untagged version of its siblings replaced by their directories
// in a scratch copy of its go.mod: what `go mod tidy` would make of it once they are
// tagged. A sibling required at a tag is resolved as a user would resolve it.
func TestModulesAreTidy(t *testing.T) {
	root := repoRoot(t)
	type module struct{ Path, Dir string }
	var mods []module
	out := goCmd(t, root, nil, "list", "-m", "-json")
	for dec := json.NewDecoder(strings.NewReader(out)); ; {
		var m module
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		mods = append(mods, m)
	}
	for _, m := range mods {
		name := strings.TrimPrefix(m.Path, "github.com/fusebox-dev/fusebox/")
		if m.Path == "github.com/fusebox-dev/fusebox" {
			name = "operator"
		}
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			modfile := filepath.Join(tmp, "go.mod")
			copyFile(t, filepath.Join(m.Dir, "go.mod"), modfile)
			copyFile(t, filepath.Join(m.Dir, "go.sum"), filepath.Join(tmp, "go.sum"))
			args := []string{"mod", "edit"}
			for _, o := range mods {
				if o.Path != m.Path {
					args = append(args, "-replace="+o.Path+"@"+unpublished+"="+o.Dir)
				}
			}
			goCmd(t, m.Dir, nil, append(args, modfile)...)
			env := []string{"GOWORK=off"}
			cmd := exec.Command("go", "mod", "tidy", "-diff", "-modfile="+modfile)
			cmd.Dir, cmd.Env = m.Dir, append(os.Environ(), env...)
			if diff, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s/go.mod is not tidy (run `make tidy`): %v\n%s", m.Dir, err, diff)
			}
		})
	}
}

// copyFile copies src to dst; a missing src (a module without requirements has no go.sum)
// copies nothing.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
