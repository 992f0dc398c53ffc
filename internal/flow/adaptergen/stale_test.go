package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// root is the module root, seen from this directory.
const root = "../../.."

// adapters are the packages whose files this command writes.
var adapters = []string{"nethttp", "chilimit", "ginlimit", "echolimit"}

// TestGeneratedFilesUpToDate regenerates every adapter's generated files in
// memory and fails when a checked-in one differs: a hand edit of a
// generated file, or an edit of internal/flow/options.go or of the
// constructors' template without go generate ./... .
func TestGeneratedFilesUpToDate(t *testing.T) {
	for _, pkg := range adapters {
		dir := filepath.Join(root, pkg)
		files, err := generateAll(pkg, dir)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		for name, want := range files {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s/%s is stale (%s): run go generate ./... and commit the result; edit %s or %s, never a generated file",
					pkg, name, firstDiff(got, want), source, constructorsSource)
			}
		}
		if !hasDirective(t, dir) {
			t.Errorf("%s: no //go:generate go run ../internal/flow/adaptergen directive", pkg)
		}
	}
}

// hasDirective reports whether a file of dir runs this command under go
// generate.
func hasDirective(t *testing.T, dir string) bool {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("\n//go:generate go run ../internal/flow/adaptergen\n")) {
			return true
		}
	}
	return false
}

// firstDiff names the first line where got and want differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) && i < len(w); i++ {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d: has %q, want %q", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("has %d lines, want %d", len(g), len(w))
}
