package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// poolSize is the connection pool of every client: enough for 256 callers
// that each hold a connection for a whole round trip (one EVALSHA per
// decision), so no library waits for a free connection.
const poolSize = 256

// clientOptions are the go-redis options of every benchmarked library; only
// the address differs. Everything else is go-redis's default (v9.22: RESP3,
// 5s read and write timeouts, 3 retries, context deadlines not applied to
// socket reads), as a user who does not tune would have it.
// BENCHMARKS.md states them: change both together.
//
// -redis.ctxtimeout sets ContextTimeoutEnabled on every client: go-redis then
// ends a command at its context's deadline, which lets sluice send a lone
// caller's decision from the caller's goroutine. It changes nothing for the
// peers, whose calls carry no deadline.
func clientOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, PoolSize: poolSize, ContextTimeoutEnabled: *ctxTimeout}
}

// clusterOptions are clientOptions for a Redis Cluster (PoolSize is per node).
func clusterOptions(addrs []string) *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: addrs, PoolSize: poolSize, ContextTimeoutEnabled: *ctxTimeout}
}

var ctxTimeout = flag.Bool("redis.ctxtimeout", false, "set ContextTimeoutEnabled on every go-redis client")

// target is the Redis server of BenchmarkAllow and TestMemoryPerKey.
var target struct {
	addr  string
	owned bool // started here: flushing it between runs is safe
	url   *redis.Options
}

var (
	procsMu sync.Mutex
	procs   []*server // every redis-server started by this binary
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	defer stopAll()
	flag.Parse() // for -redis.ctxtimeout, read before the first client
	if u := os.Getenv("REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			return 1, fmt.Errorf("REDIS_URL: %w", err)
		}
		target.url, target.addr = opt, opt.Addr
	} else {
		s, err := startServer(nil)
		if err != nil {
			return 1, err
		}
		target.addr, target.owned = s.addr, true
	}
	printEnv()
	code := m.Run()
	fmt.Printf("bench-env: loadavg-end=%q\n", loadavg())
	return code, nil
}

// newClient returns a client of the target with clientOptions.
func newClient() *redis.Client {
	return newClientWith(nil)
}

// newClientWith returns a client of the target with clientOptions, changed
// by edit when it is not nil.
func newClientWith(edit func(*redis.Options)) *redis.Client {
	opt := clientOptions(target.addr)
	if edit != nil {
		edit(opt)
	}
	if u := target.url; u != nil { // keep REDIS_URL's credentials and database
		opt.Username, opt.Password, opt.DB, opt.TLSConfig = u.Username, u.Password, u.DB, u.TLSConfig
	}
	return redis.NewClient(opt)
}

// flush empties the target between runs, so that every library starts from
// the same empty database; never a server that REDIS_URL names.
func flush(b testing.TB, rdb redis.UniversalClient) {
	b.Helper()
	if !target.owned {
		return
	}
	ctx := context.Background()
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.FlushDB(ctx).Err()
		})
	} else {
		err = rdb.FlushDB(ctx).Err()
	}
	if err != nil {
		b.Fatalf("FLUSHDB: %v", err)
	}
}

// printEnv prints the machine and server, for cmd/report and BENCHMARKS.md.
func printEnv() {
	c := newClient()
	defer c.Close()
	version := "unknown"
	if info, err := c.Info(context.Background(), "server").Result(); err == nil {
		version = infoField(info, "redis_version")
	}
	client := fmt.Sprintf("go-redis v9 PoolSize=%d, defaults otherwise", poolSize)
	if *ctxTimeout {
		client = fmt.Sprintf("go-redis v9 PoolSize=%d ContextTimeoutEnabled=true, defaults otherwise", poolSize)
	}
	fmt.Printf("bench-env: date=%q nproc=%d gomaxprocs=%d go=%s redis=%s cpu=%q loadavg-start=%q client=%q\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(),
		version, cpuModel(), loadavg(), client)
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// server is a redis-server process started by this binary.
type server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
}

// redisBinary finds name in PATH or the usual places.
func redisBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/local/bin", "/usr/sbin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (install Redis, or set REDIS_URL)", name)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// freePort returns a loopback port that was free a moment ago, below 55536
// so that a cluster bus port (port+10000) fits too.
func freePort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port < 55536 {
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port below 55536")
}

// startServer starts a redis-server without persistence on a free loopback
// port, with extra configuration args, and waits until it answers PING.
func startServer(args []string) (*server, error) {
	bin, err := redisBinary("redis-server")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "sluice-bench-redis-")
		if err != nil {
			return nil, err
		}
		s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir}
		all := append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--protected-mode", "no", "--loglevel", "warning",
		}, args...)
		s.cmd = exec.Command(bin, all...)
		s.cmd.SysProcAttr = sysProcAttr()
		var stderr bytes.Buffer
		s.cmd.Stdout, s.cmd.Stderr = &stderr, &stderr
		if err := s.cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if lastErr = waitPing(s.addr, 10*time.Second); lastErr == nil {
			procsMu.Lock()
			procs = append(procs, s)
			procsMu.Unlock()
			return s, nil
		}
		s.stop()
		lastErr = fmt.Errorf("%w; output: %s", lastErr, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil, lastErr
}

func waitPing(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			fmt.Fprint(c, "PING\r\n")
			c.SetReadDeadline(time.Now().Add(time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s did not answer PING within %s", addr, timeout)
}

func (s *server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	os.RemoveAll(s.dir)
}

func stopAll() {
	procsMu.Lock()
	defer procsMu.Unlock()
	for _, s := range procs {
		s.stop()
	}
	procs = nil
}

// cluster is a Redis Cluster of masters only, on loopback.
type cluster struct {
	nodes []*server
}

func (c *cluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		out[i] = s.addr
	}
	return out
}

func (c *cluster) stop() {
	procsMu.Lock()
	defer procsMu.Unlock()
	for _, s := range c.nodes {
		s.stop()
		for i, p := range procs {
			if p == s {
				procs = append(procs[:i], procs[i+1:]...)
				break
			}
		}
	}
}

// startCluster starts a cluster of n masters and no replicas: for n > 1
// with "redis-cli --cluster create", for one master by giving it every slot
// (redis-cli refuses fewer than three masters). It waits until every node
// reports cluster_state:ok and knows all the others.
func startCluster(n int) (*cluster, error) {
	c := &cluster{}
	for i := range n {
		s, err := startServer([]string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		})
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("cluster node %d: %w", i, err)
		}
		c.nodes = append(c.nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if n == 1 {
		node := redis.NewClient(&redis.Options{Addr: c.nodes[0].addr})
		err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err()
		node.Close()
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("CLUSTER ADDSLOTSRANGE: %w", err)
		}
	} else {
		cli, err := redisBinary("redis-cli")
		if err != nil {
			c.stop()
			return nil, err
		}
		args := append([]string{"--cluster", "create"}, c.addrs()...)
		args = append(args, "--cluster-replicas", "0", "--cluster-yes")
		cmd := exec.CommandContext(ctx, cli, args...)
		cmd.SysProcAttr = sysProcAttr()
		if out, err := cmd.CombinedOutput(); err != nil {
			c.stop()
			return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
		}
	}
	if err := c.waitReady(ctx, n); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func (c *cluster) waitReady(ctx context.Context, n int) error {
	for _, s := range c.nodes {
		node := redis.NewClient(&redis.Options{Addr: s.addr})
		for {
			info, err := node.ClusterInfo(ctx).Result()
			if err == nil && infoField(info, "cluster_state") == "ok" &&
				infoField(info, "cluster_known_nodes") == strconv.Itoa(n) &&
				infoField(info, "cluster_slots_ok") == "16384" {
				break
			}
			select {
			case <-ctx.Done():
				node.Close()
				return fmt.Errorf("cluster node %s not ready: %v (last error %v)", s.addr, ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		node.Close()
	}
	return nil
}
