package examples_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// snippetPrelude is the file that every README snippet that is not a whole
// program is compiled in: the imports and names a reader has at hand
// (rdb, ctx, a handler), each snippet the body of a function of its own.
const snippetPrelude = `package main

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/chilimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/nethttp"
)

var (
	ctx   = context.Background()
	rdb   = redis.NewClient(&redis.Options{})
	queue chan int
)

func process(int)                                 {}
func planOf(*http.Request) string                 { return "" }
func home(w http.ResponseWriter, r *http.Request) {}

func main() {}
`

// TestReadmeSnippetsCompile compiles every Go snippet of README.md: a whole
// program as it is, any other as the body of a function in snippetPrelude.
// A snippet may leave a name unused (it shows one step, not a program);
// any other compile error fails the test.
func TestReadmeSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the README's snippets")
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	programs, fragments := goBlocks(string(readme))
	if len(programs) == 0 || len(fragments) == 0 {
		t.Fatalf("README.md: %d whole programs and %d snippets; want some of each", len(programs), len(fragments))
	}
	// Inside the module, so that its imports resolve; "_" keeps the
	// directory out of ./... patterns while it exists.
	dir, err := os.MkdirTemp(".", "_readme")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var src strings.Builder
	src.WriteString(snippetPrelude)
	for i, f := range fragments {
		fmt.Fprintf(&src, "\nfunc snippet%d() error {\n%s\nreturn nil\n}\n", i, f)
	}
	write(t, filepath.Join(dir, "snippets", "main.go"), src.String())
	for i, p := range programs {
		write(t, filepath.Join(dir, fmt.Sprintf("program%d", i), "main.go"), p)
	}

	gobin := goBin()
	pkgs := []string{"./" + filepath.ToSlash(filepath.Join(dir, "snippets"))}
	for i := range programs {
		pkgs = append(pkgs, "./"+filepath.ToSlash(filepath.Join(dir, fmt.Sprintf("program%d", i))))
	}
	// -e: every error, so that one unused name hides nothing behind it.
	cmd := exec.Command(gobin, append([]string{"build", "-gcflags=-e", "-o", os.DevNull}, pkgs...)...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		if line == "" || strings.HasPrefix(line, "#") ||
			strings.Contains(line, "declared and not used") || strings.Contains(line, "imported and not used") {
			continue
		}
		t.Errorf("%s", line)
	}
	if t.Failed() {
		t.Logf("snippets compiled as:\n%s", src.String())
	}
}

// goBlocks returns the ```go blocks of markdown: whole programs (they
// start with a package clause) and the others.
func goBlocks(markdown string) (programs, fragments []string) {
	rest := markdown
	for {
		_, after, ok := strings.Cut(rest, "\n```go\n")
		if !ok {
			return programs, fragments
		}
		block, tail, _ := strings.Cut(after, "\n```")
		rest = tail
		if strings.HasPrefix(block, "package ") {
			programs = append(programs, block+"\n")
		} else {
			fragments = append(fragments, block)
		}
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
