package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMasterName is the name under which StartSentinel's sentinel
// monitors its master.
const SentinelMasterName = "sluice"

// Sentinel is a master, one replica and one Redis Sentinel monitoring them,
// started by StartSentinel for one test and stopped when that test ends.
type Sentinel struct {
	// MasterName is the name the sentinel knows the master by.
	MasterName string
	// Addr is the sentinel's address.
	Addr string
	// Master and Replica are the data servers as started. A failover swaps
	// their roles: ask MasterAddr for the current master.
	Master, Replica *Server

	sentinel *Server
	admin    *redis.SentinelClient
	nodes    map[string]*redis.Client // plain clients of Master and Replica
}

// StartSentinel starts a master, a replica of it and a sentinel monitoring
// the master on free loopback ports, and waits until the replica has synced
// and the sentinel knows the master and sees the replica as a healthy
// candidate for promotion. The sentinel has quorum 1, down-after 5s (a
// loaded test machine sets off no failover of its own) and failover
// timeout 10s. Everything is stopped, and its files removed, when t ends.
//
// Without redis-server the test is skipped, or fails under CI=true. Any
// other startup problem fails the test.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin, err := Binary("redis-server")
	if err != nil {
		missing(t, err)
	}
	s := &Sentinel{MasterName: SentinelMasterName, nodes: map[string]*redis.Client{}}
	t.Cleanup(s.stop)
	if err := s.start(bin); err != nil {
		t.Fatalf("redistest: starting Redis Sentinel: %v", err)
	}
	return s
}

func (s *Sentinel) start(bin string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	common := []string{
		"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
		"--logfile", "redis.log", "--loglevel", "notice",
	}
	var err error
	if s.Master, err = Start(common); err != nil {
		return fmt.Errorf("master: %w", err)
	}
	s.nodes[s.Master.Addr] = sentinelNodeClient(s.Master.Addr)
	replicaArgs := append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port)}, common...)
	if s.Replica, err = Start(replicaArgs); err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	s.nodes[s.Replica.Addr] = sentinelNodeClient(s.Replica.Addr)
	// Start the sentinel once the replica is listed by the master: the
	// sentinel learns of replicas from the master's INFO.
	if err := waitFor(ctx, func() error {
		return replicaSynced(ctx, s.nodes[s.Master.Addr], s.nodes[s.Replica.Addr])
	}); err != nil {
		return err
	}
	if s.sentinel, err = startSentinelProcess(bin, s.Master.Port); err != nil {
		return err
	}
	s.Addr = s.sentinel.Addr
	s.admin = redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	// A sentinel whose timer stalls for 2s (a loaded test machine, a slow
	// fsync of its config) enters TILT mode and does nothing for 30s, a
	// requested failover included. Redis 7 lets that trigger be raised;
	// older versions refuse, and keep the default.
	s.admin.Process(ctx, redis.NewStatusCmd(ctx, "sentinel", "debug", "tilt-trigger", "60000"))
	if err := waitFor(ctx, s.ready); err != nil {
		return fmt.Errorf("sentinel not ready: %v%s", err, s.logTails())
	}
	return nil
}

func sentinelNodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, PoolSize: 2,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second,
	})
}

// ready returns nil when the sentinel names Master as the master, the
// replica is synced, and the sentinel sees it healthy (flags "slave" only,
// its link to the master "ok"): what SENTINEL FAILOVER needs to pick it.
func (s *Sentinel) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	master, err := s.MasterAddr(ctx)
	if err != nil {
		return err
	}
	if master != s.Master.Addr {
		return fmt.Errorf("sentinel names master %s, want %s", master, s.Master.Addr)
	}
	if err := replicaSynced(ctx, s.nodes[s.Master.Addr], s.nodes[s.Replica.Addr]); err != nil {
		return err
	}
	replicas, err := s.admin.Replicas(ctx, s.MasterName).Result()
	if err != nil {
		return fmt.Errorf("SENTINEL REPLICAS: %w", err)
	}
	for _, r := range replicas {
		if r["name"] == s.Replica.Addr && r["flags"] == "slave" && r["master-link-status"] == "ok" {
			return nil
		}
	}
	return fmt.Errorf("sentinel does not see replica %s as healthy: %v", s.Replica.Addr, replicas)
}

// MasterAddr returns the master's address as the sentinel reports it
// (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	addr, err := s.admin.GetMasterAddrByName(ctx, s.MasterName).Result()
	if err != nil {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s: %w", s.MasterName, err)
	}
	if len(addr) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s: %v", s.MasterName, addr)
	}
	return net.JoinHostPort(addr[0], addr[1]), nil
}

// Client returns a new failover client (redis.NewFailoverClient) that finds
// the master through the sentinel, closed when t ends.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    s.MasterName,
		SentinelAddrs: []string{s.Addr},
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// SentinelClient returns a new client of the sentinel itself, closed when t
// ends.
func (s *Sentinel) SentinelClient(t testing.TB) *redis.SentinelClient {
	t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// Node returns a plain client of the data server at addr (Master.Addr or
// Replica.Addr), for commands aimed at it, or nil for another address. It
// belongs to s: do not close it.
func (s *Sentinel) Node(addr string) *redis.Client {
	return s.nodes[addr]
}

// Role returns the role the data server at addr reports (ROLE): "master"
// or "slave".
func (s *Sentinel) Role(ctx context.Context, addr string) (string, error) {
	c := s.nodes[addr]
	if c == nil {
		return "", fmt.Errorf("%s is not a data server of the sentinel setup", addr)
	}
	return role(ctx, c)
}

// WaitMaster waits until the sentinel reports addr as the master and the
// server at addr reports itself master. It gives up with the last problem
// seen when ctx is done, or after 30 seconds when ctx has no deadline.
func (s *Sentinel) WaitMaster(ctx context.Context, addr string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	err := waitFor(ctx, func() error {
		got, err := s.MasterAddr(ctx)
		if err != nil {
			return err
		}
		if got != addr {
			return fmt.Errorf("sentinel names master %s, want %s", got, addr)
		}
		if r, err := s.Role(ctx, addr); err != nil || r != "master" {
			return fmt.Errorf("%s has role %q (%v)", addr, r, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%v%s", err, s.logTails())
	}
	return nil
}

func (s *Sentinel) stop() {
	if s.admin != nil {
		s.admin.Close()
	}
	for _, c := range s.nodes {
		c.Close()
	}
	for _, srv := range []*Server{s.sentinel, s.Replica, s.Master} {
		if srv != nil {
			srv.Stop()
			os.RemoveAll(srv.dir)
		}
	}
}

func (s *Sentinel) logTails() string {
	var b strings.Builder
	for _, srv := range []*Server{s.Master, s.Replica, s.sentinel} {
		if srv != nil {
			b.WriteString(logTail(srv))
		}
	}
	return b.String()
}

// startSentinelProcess starts "redis-server <config> --sentinel" on a free
// loopback port, monitoring the master at masterPort, and registers it so
// that StopAll stops it too. A sentinel rewrites its config file, so the
// file lives in a directory of its own.
func startSentinelProcess(bin string, masterPort int) (*Server, error) {
	dir, err := os.MkdirTemp("", "sluice-sentinel-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
logfile %s
loglevel notice
sentinel monitor %s 127.0.0.1 %d 1
sentinel down-after-milliseconds %[4]s 5000
sentinel failover-timeout %[4]s 10000
sentinel parallel-syncs %[4]s 1
`, port, dir, filepath.Join(dir, "redis.log"), SentinelMasterName, masterPort)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		cmd := exec.Command(bin, conf, "--sentinel")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		srv := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir, cmd: cmd}
		if lastErr = waitServes(srv.Addr, cmd.Process.Pid, 10*time.Second); lastErr == nil {
			mu.Lock()
			started = append(started, srv)
			mu.Unlock()
			return srv, nil
		}
		cmd.Process.Kill()
		cmd.Wait()
		lastErr = fmt.Errorf("sentinel: %v%s", lastErr, logTail(srv))
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// waitServes waits until the server at addr answers as the process pid.
//
// Ports are found free (FreePort) and handed to redis-server, so two test
// binaries may hand the same port to two servers: one of them cannot
// listen and exits, and a PING to the port would be answered by the other
// one. INFO's process_id tells them apart, and the loser is started again
// on another port.
func waitServes(addr string, pid int, timeout time.Duration) error {
	want := "process_id:" + strconv.Itoa(pid) + "\r\n"
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			fmt.Fprintf(c, "INFO server\r\n")
			c.SetReadDeadline(time.Now().Add(time.Second))
			info, _ := readBulk(bufio.NewReader(c))
			c.Close()
			if strings.Contains(info, want) {
				return nil
			}
			if _, rest, ok := strings.Cut(info, "process_id:"); ok {
				got, _, _ := strings.Cut(rest, "\r\n")
				return fmt.Errorf("%s is served by process %s, not by redis-server %d", addr, got, pid)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer INFO within %s", addr, timeout)
}

// readBulk reads one RESP bulk string.
func readBulk(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(line, "$") {
		return "", fmt.Errorf("not a bulk string: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 || n > 1<<20 { // INFO server is a few KB
		return "", fmt.Errorf("bad bulk length: %q", line)
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// waitFor calls check every 50ms until it returns nil, or returns the last
// problem it reported when ctx is done.
func waitFor(ctx context.Context, check func() error) error {
	start := time.Now()
	var last error
	for {
		err := check()
		if err == nil {
			return nil
		}
		if last == nil || ctx.Err() == nil { // keep the problem, not the expired context
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %v", time.Since(start).Round(time.Millisecond), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
