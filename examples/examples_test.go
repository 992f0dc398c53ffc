// Package examples_test builds every example, runs it the way a reader
// would (no Redis configured, so on the embedded miniredis) and checks that
// it limits.
package examples_test

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// servers are the examples that serve HTTP; jobs is run to completion.
var servers = []string{"nethttp", "gin", "chi", "echo"}

// goBin returns the go command: the one on PATH, or the toolchain's own.
func goBin() string {
	if gobin, err := exec.LookPath("go"); err == nil {
		return gobin
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// build compiles every example into a temporary directory, in one go
// command, and returns the directory.
func build(t *testing.T) string {
	t.Helper()
	gobin := goBin()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, name := range append(servers, "jobs") {
		args = append(args, "./"+name)
	}
	cmd := exec.Command(gobin, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dir
}

// env is the environment of an example: without REDIS_URL, so that it
// embeds its Redis as a reader's first run would.
func env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_URL=") {
			out = append(out, kv)
		}
	}
	return out
}

func TestExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs every example")
	}
	dir := build(t)
	for _, name := range servers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			serve(t, filepath.Join(dir, name))
		})
	}
	t.Run("jobs", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "jobs"), "-period", "300ms", "-jobs", "6", "-workers", "3")
		cmd.Env = env()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("jobs: %v\n%s", err, out)
		}
		if n := strings.Count(string(out), ": job "); n != 6 || !strings.Contains(string(out), "queue done") {
			t.Errorf("jobs ran %d jobs, want 6:\n%s", n, out)
		}
	})
}

// serve starts the example at bin on a free port, waits until it listens,
// and checks that GET / answers 200, then 429 within 11 more requests.
func serve(t *testing.T, bin string) {
	addr := "127.0.0.1:0"
	cmd := exec.Command(bin, "-addr", addr)
	cmd.Env = env()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})

	// The examples log "listening on http://<addr>" once they accept: the
	// port the system gave them for -addr 127.0.0.1:0. (A port found free
	// here and handed over could be taken meanwhile by a redis-server that
	// another package's tests start on a port found free.)
	listening := make(chan string, 1)
	var logged strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		found := false
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), "listening on http://"); ok && !found {
				found = true
				listening <- a
			}
			if !found {
				logged.WriteString(sc.Text() + "\n")
			}
		}
		if !found {
			listening <- ""
		}
	}()
	select {
	case addr = <-listening:
		if addr == "" {
			t.Fatalf("%s exited before listening:\n%s", bin, logged.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not listen within 30s", bin)
	}

	client := &http.Client{Timeout: 10 * time.Second}
	get := func() *http.Response {
		t.Helper()
		resp, err := client.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	first := get()
	if first.StatusCode != http.StatusOK || first.Header.Get("RateLimit-Policy") == "" {
		t.Fatalf("first GET /: %s, RateLimit-Policy %q; want 200 with rate-limit headers", first.Status, first.Header.Get("RateLimit-Policy"))
	}
	for i := 1; i <= 11; i++ {
		resp := get()
		switch resp.StatusCode {
		case http.StatusOK:
			continue
		case http.StatusTooManyRequests:
			if resp.Header.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
			return
		default:
			t.Fatalf("GET / number %d: %s", i+1, resp.Status)
		}
	}
	t.Fatal("no 429 within 12 requests to GET /")
}
