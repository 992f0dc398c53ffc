// Package observability_test builds both examples, runs them the way a
// reader would (no Redis configured, so on the embedded miniredis) and
// checks that they serve, limit and export.
package observability_test

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example")
	}
	addr, _ := start(t, "prometheus")
	get(t, addr, "/")
	body := get(t, addr, "/metrics")
	for _, want := range []string{
		`sluice_decisions_total{limiter="global",outcome="allowed",rule="sliding_window_log",shadow="false"} 1`,
		`sluice_decision_seconds_count{limiter="global",outcome="allowed"} 1`,
		`sluice_redis_healthy{limiter="global"} 1`,
		`sluice_redis_healthy{limiter="beta"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics has no line %s:\n%s", want, body)
		}
	}
}

func TestOTel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example")
	}
	addr, stdout := start(t, "otel", "-interval", "100ms")
	get(t, addr, "/")
	// The periodic reader prints the metrics as JSON; wait for the first
	// export that holds a decision.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stdout.String(), `"Name": "sluice.decisions"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no sluice.decisions on stdout within 30s:\n%s", stdout.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// build compiles both examples into a temporary directory, once, in one go
// command. go test puts its own go first on PATH.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "sluice-observability-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+string(filepath.Separator), "./prometheus", "./otel")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = &buildError{err, out}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + string(e.out) }

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// start runs the example name with -addr on a free port and without
// REDIS_URL, waits until it listens and returns the address and its
// standard output so far, as it grows. The test's cleanup kills it.
func start(t *testing.T, name string, args ...string) (addr string, stdout *syncBuffer) {
	t.Helper()
	addr = "127.0.0.1:0"
	cmd := exec.Command(filepath.Join(build(t), name), append([]string{"-addr", addr}, args...)...)
	cmd.Env = env()
	stdout = new(syncBuffer)
	cmd.Stdout = stdout
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
	var logged syncBuffer
	go func() {
		sc := bufio.NewScanner(stderr)
		found := false
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), "listening on http://"); ok && !found {
				found = true
				listening <- a
			}
			if !found {
				logged.Write([]byte(sc.Text() + "\n"))
			}
		}
		if !found {
			listening <- ""
		}
		io.Copy(io.Discard, stderr)
	}()
	select {
	case addr = <-listening:
		if addr == "" {
			t.Fatalf("%s exited before listening:\n%s", name, logged.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not listen within 30s", name)
	}
	return addr, stdout
}

// get requests path and checks that the answer is 200; it returns the body.
// GET / must carry rate-limit headers.
func get(t *testing.T, addr, path string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
	}
	if path == "/" && resp.Header.Get("RateLimit-Policy") == "" {
		t.Errorf("GET /: no RateLimit-Policy header")
	}
	return string(body)
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

// syncBuffer is a strings.Builder that a process writes while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
