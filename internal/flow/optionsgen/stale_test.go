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

// adapters are the packages whose options.go this command writes.
var adapters = []string{"nethttp", "chilimit", "ginlimit", "echolimit"}

// TestGeneratedOptionsUpToDate regenerates every adapter's options.go in
// memory and fails when the checked-in file differs: a hand edit of a
// generated file, or an edit of internal/flow/options.go without
// go generate ./... .
func TestGeneratedOptionsUpToDate(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(root, source))
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range adapters {
		want, err := generate(pkg, src)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		path := filepath.Join(root, pkg, "options.go")
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s/options.go is stale (%s): run go generate ./... and commit the result; edit %s, never the generated file",
				pkg, firstDiff(got, want), source)
		}
		if !hasDirective(t, filepath.Join(root, pkg)) {
			t.Errorf("%s: no //go:generate go run ../internal/flow/optionsgen directive", pkg)
		}
	}
}

// hasDirective reports whether a hand-written file of dir runs this
// command under go generate.
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
		if bytes.Contains(b, []byte("\n//go:generate go run ../internal/flow/optionsgen\n")) {
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
