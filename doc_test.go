// Package weft_test checks rules that hold for the whole module.
package weft_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// walkGo calls f with every Go file of the repository (the tools' modules too), but those
// below hidden directories (the caches) and testdata.
func walkGo(t *testing.T, f func(path string, src []byte) error) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		return f(path, src)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no Go files found")
	}
}

// TestPackagesHaveDocs: every package says what it is for, in a package doc comment.
func TestPackagesHaveDocs(t *testing.T) {
	documented := map[string]bool{}
	seen := map[string]bool{}
	walkGo(t, func(path string, src []byte) error {
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		seen[dir] = true
		want := "Package " + f.Name.Name + " "
		if f.Name.Name == "main" {
			want = "Command "
		}
		if f.Doc != nil && strings.HasPrefix(f.Doc.Text(), want) {
			documented[dir] = true
		}
		return nil
	})
	for dir := range seen {
		if !documented[dir] {
			t.Errorf("package in %s has no doc comment (\"Package <name> ...\", or \"Command <name> ...\" for a main)", dir)
		}
	}
}

// module is the import path of weft's own packages.
const module = "github.com/weftnet/weft"

// Import groups, in the order a file lists them, each apart from the next by a blank line.
const (
	groupStd    = iota // the standard library: no dot in the path's first element
	groupOthers        // other modules
	groupWeft          // weft's own packages
)

var groupNames = [...]string{groupStd: "the standard library", groupOthers: "other modules", groupWeft: module}

func importGroup(path string) int {
	switch first, _, _ := strings.Cut(path, "/"); {
	case path == module || strings.HasPrefix(path, module+"/"):
		return groupWeft
	case strings.Contains(first, "."):
		return groupOthers
	}
	return groupStd
}

// importProblems says what is wrong with the grouping of a file's imports: the standard
// library first, then other modules, then weft's own packages, with a blank line between
// groups (a group may have blank lines of its own). gofmt sorts within the blocks this makes.
func importProblems(path string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var problems []string
	// The highest group so far, the import that opened it, the line the last import ends on.
	prevGroup, prevPath, prevLine := -1, "", 0
	for _, spec := range f.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: import %s: %w", path, spec.Path.Value, err)
		}
		g, pos := importGroup(p), fset.Position(spec.Pos())
		switch {
		case p == "C": // cgo's, in a declaration of its own
		case g < prevGroup:
			problems = append(problems, fmt.Sprintf("%s: %q (%s) after %q (%s): the standard library, then other modules, then %s",
				pos, p, groupNames[g], prevPath, groupNames[prevGroup], module))
		case g > prevGroup && prevGroup >= 0 && pos.Line == prevLine+1:
			problems = append(problems, fmt.Sprintf("%s: %q (%s) right after %s: a blank line goes between the groups",
				pos, p, groupNames[g], groupNames[prevGroup]))
		}
		if p != "C" && g > prevGroup {
			prevGroup, prevPath = g, p
		}
		prevLine = fset.Position(spec.End()).Line
	}
	return problems, nil
}

// TestImportGroups: every file groups its imports as importProblems wants (make lint runs
// it).
func TestImportGroups(t *testing.T) {
	walkGo(t, func(path string, src []byte) error {
		problems, err := importProblems(path, src)
		for _, p := range problems {
			t.Error(p)
		}
		return err
	})
}

// TestImportProblems: the check finds what it should and passes what it should.
func TestImportProblems(t *testing.T) {
	for _, tc := range []struct {
		imports string
		want    int
	}{
		{`import "fmt"`, 0},
		{"import (\n\t\"fmt\"\n\t\"os\"\n\n\t\"k8s.io/api/core/v1\"\n\n\t\"github.com/prometheus/client_golang/prometheus\"\n\n\t\"github.com/weftnet/weft/subnet\"\n)", 0},
		{"import (\n\t\"fmt\"\n\n\t\"github.com/weftnet/weft/subnet\"\n)", 0},
		{"import (\n\t\"fmt\"\n\t\"github.com/weftnet/weft/subnet\"\n)", 1},                             // no blank line
		{"import (\n\t\"github.com/weftnet/weft/subnet\"\n\n\t\"k8s.io/api/core/v1\"\n)", 1},            // weft before others
		{"import (\n\t\"k8s.io/api/core/v1\"\n\n\t\"fmt\"\n)", 1},                                       // others before std
		{"import (\n\t\"fmt\"\n\t\"github.com/weftnet/weft/subnet\"\n\t\"io\"\n)", 2},                   // std again after weft
		{"import \"github.com/weftnet/weftish/x\"\n\nimport \"github.com/weftnet/weft\"", 0},            // another module, then weft
		{"import (\n\t\"fmt\"\n\n\tv1 \"k8s.io/api/core/v1\"\n\t_ \"github.com/weftnet/weft/x\"\n)", 1}, // named imports count too
	} {
		problems, err := importProblems("x.go", []byte("package x\n\n"+tc.imports+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.imports, err)
		}
		if len(problems) != tc.want {
			t.Errorf("%s:\n%d problems, want %d: %q", tc.imports, len(problems), tc.want, problems)
		}
	}
}
