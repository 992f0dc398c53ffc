// Package redistest gives tests a real redis-server.
//
// Client returns a client of a server that the test binary starts itself on
// a free loopback port (one per test binary, started on first use), or of the
// server at REDIS_URL when that is set. Call Main from TestMain so the server
// is stopped when the tests end; it also dies with the test process.
//
// When no redis-server binary is found, tests that need one are skipped, or
// fail when CI=true: on CI a missing Redis is a broken build, not a pass.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process started for tests.
type Server struct {
	Addr string
	Port int
	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

var (
	once    sync.Once
	shared  *Server
	initErr error

	mu      sync.Mutex
	started []*Server
)

// Main runs the tests and stops every server they started.
func Main(m *testing.M) {
	code := m.Run()
	StopAll()
	os.Exit(code)
}

// StopAll stops every server started by this package.
func StopAll() {
	mu.Lock()
	defer mu.Unlock()
	for _, s := range started {
		s.Stop()
	}
	started = nil
}

// missing ends t: skipped normally, failed under CI=true.
func missing(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("redis-server is required under CI=true: %v", err)
	}
	t.Skipf("no redis-server (install redis-server or set REDIS_URL): %v", err)
}

// Options returns the connection options of the shared test server.
func Options(t testing.TB) *redis.Options {
	t.Helper()
	if u := os.Getenv("REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			t.Fatalf("REDIS_URL: %v", err)
		}
		return opt
	}
	once.Do(func() { shared, initErr = Start(nil) })
	if initErr != nil {
		missing(t, initErr)
	}
	return &redis.Options{Addr: shared.Addr}
}

// Client returns a new client of the shared test server, closed when t ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(Options(t))
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		missing(t, err)
	}
	return c
}

// Binary returns the path of a redis-server binary, or an error.
func Binary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/local/bin", "/usr/sbin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH", name)
}

// FreePort returns a loopback TCP port that was free a moment ago, as was
// port+10000, the cluster bus port a node of a Redis Cluster listens on
// beside it (so the port is below 55536).
func FreePort() (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port >= 55536 {
			l.Close()
			continue
		}
		bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
		l.Close()
		if err != nil {
			continue // the bus port is taken: another
		}
		bus.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port below 55536 whose bus port (+10000) is free too")
}

// RefusedAddr returns a loopback address that refuses connections for as
// long as tb runs, for tests of a Redis that cannot be reached.
//
// A port found free and closed again does not do: test binaries of other
// packages run meanwhile and start their redis-servers on ports found
// free, and one of them may take it, so that a test expecting a refused
// connection gets answers. The port returned here is held instead, by a
// connection of tb's own (127.0.0.1:port to a listener closed at once):
// nothing listens on it, so a connection to it is refused, and no
// listener can take it while it is held, since a dialled socket does not
// share its port (no SO_REUSEADDR). The connection is closed when tb ends.
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		c.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Close()
		s.Close()
	})
	return c.LocalAddr().String()
}

// RefusedClient returns a client of RefusedAddr, closed when tb ends. It
// dials once per command and retries none: go-redis dials five times,
// 100ms apart, by default, and sluice sends a call that could not connect
// up to four times, so that a decision on a refused port would take 1.7s;
// the tests are about what follows the refusal.
func RefusedClient(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: RefusedAddr(tb), MaxRetries: -1, DialerRetries: 1})
	tb.Cleanup(func() { c.Close() })
	return c
}

// StartT starts a redis-server of t's own (one it may stop and restart),
// stopped when t ends: skipped when there is none, failed under CI=true.
func StartT(t testing.TB) *Server {
	t.Helper()
	srv, err := Start(nil)
	if err != nil {
		missing(t, err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// Start starts a redis-server on a free loopback port with the extra
// configuration args (pairs like "--appendonly", "no") and waits until it
// answers PING.
func Start(args []string) (*Server, error) {
	bin, err := Binary("redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir, args: args}
		if lastErr = s.start(bin); lastErr == nil {
			mu.Lock()
			started = append(started, s)
			mu.Unlock()
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func (s *Server) start(bin string) error {
	args := append([]string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--dbfilename", fmt.Sprintf("dump-%d.rdb", s.Port),
		"--protected-mode", "no", "--loglevel", "warning",
	}, s.args...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { // drain, keep the last lines for error reports
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
		}
	}()
	if err := waitServes(s.Addr, cmd.Process.Pid, 10*time.Second); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("redis-server on %s: %w", s.Addr, err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	return nil
}

// Stop kills the server. It may be started again with Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// Restart starts a stopped server again on the same port, empty.
func (s *Server) Restart() error {
	bin, err := Binary("redis-server")
	if err != nil {
		return err
	}
	return s.start(bin)
}
