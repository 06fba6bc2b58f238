// Package weft_test checks rules that hold for the whole module.
package weft_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackagesHaveDocs: every package says what it is for, in a package doc comment.
func TestPackagesHaveDocs(t *testing.T) {
	documented := map[string]bool{}
	seen := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
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
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) == 0 {
		t.Fatal("no packages found")
	}
	for dir := range seen {
		if !documented[dir] {
			t.Errorf("package in %s has no doc comment (\"Package <name> ...\", or \"Command <name> ...\" for a main)", dir)
		}
	}
}
