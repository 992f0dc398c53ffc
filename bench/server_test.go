package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
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
	defer redistest.StopAll()
	flag.Parse() // for -redis.ctxtimeout, read before the first client
	if u := os.Getenv("REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			return 1, fmt.Errorf("REDIS_URL: %w", err)
		}
		target.url, target.addr = opt, opt.Addr
	} else {
		// The project's test helper: a redis-server on a free loopback
		// port, without persistence, that dies with this binary.
		s, err := redistest.Start(nil)
		if err != nil {
			return 1, err
		}
		target.addr, target.owned = s.Addr, true
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

// cluster is a Redis Cluster of masters only, on loopback.
type cluster struct {
	nodes []*redistest.Server
}

func (c *cluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		out[i] = s.Addr
	}
	return out
}

func (c *cluster) stop() {
	for _, s := range c.nodes {
		s.Stop()
	}
}

// startCluster starts a cluster of n masters and no replicas: for n > 1
// with "redis-cli --cluster create", for one master by giving it every slot
// (redis-cli refuses fewer than three masters). It waits until every node
// reports cluster_state:ok and knows all the others.
func startCluster(n int) (*cluster, error) {
	c := &cluster{}
	for i := range n {
		s, err := redistest.Start([]string{
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
		node := redis.NewClient(&redis.Options{Addr: c.nodes[0].Addr})
		err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err()
		node.Close()
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("CLUSTER ADDSLOTSRANGE: %w", err)
		}
	} else {
		cli, err := redistest.Binary("redis-cli")
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
		node := redis.NewClient(&redis.Options{Addr: s.Addr})
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
				return fmt.Errorf("cluster node %s not ready: %v (last error %v)", s.Addr, ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		node.Close()
	}
	return nil
}
