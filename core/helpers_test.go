package core

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// holdOnlyConnection takes the only connection of c's pool (PoolSize 1) with a
// BLPOP that blocks until release is called. It returns once Redis reports
// the BLPOP as blocked.
func holdOnlyConnection(t *testing.T, c *redis.Client, name string) (release func()) {
	t.Helper()
	admin := redistest.Client(t)
	ctx := context.Background()
	list := fmt.Sprintf("edge-hold-%s-%d", name, time.Now().UnixNano())
	done := make(chan error, 1)
	go func() { done <- c.BLPop(context.Background(), 0, list).Err() }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		clients, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(clients, "name="+name+" ") && strings.Contains(clients, "cmd=blpop") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the BLPOP never blocked:\n%s", clients)
		}
		time.Sleep(time.Millisecond)
	}
	released := false
	release = func() {
		if released {
			return
		}
		released = true
		admin.LPush(ctx, list, "x")
		if err := <-done; err != nil {
			t.Errorf("BLPOP: %v", err)
		}
	}
	t.Cleanup(release)
	return release
}

// waitBatcherIdle waits until b has no flusher and no inline sender left.
func waitBatcherIdle(t *testing.T, b *batcher) {
	t.Helper()
	for deadline := time.Now().Add(40 * time.Second); ; {
		b.mu.Lock()
		idle := b.active == 0 && len(b.pending) == 0
		b.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the batcher never went idle")
		}
		time.Sleep(time.Millisecond)
	}
}

// droppingProxy forwards TCP to addr. Once swallow is armed, the first
// connection that sends an EVALSHA gets no reply from then on: Redis runs
// the script, the client never hears back.
type droppingProxy struct {
	addr    string
	mu      sync.Mutex
	armed   bool
	swallow net.Conn // the client side whose replies are dropped
	// refuse, when above 0, answers that many writes holding an EVALSHA
	// with a LOADING error instead of forwarding them: Redis never sees
	// them, as while it loads its data after a restart.
	refuse int
}

func startDroppingProxy(t *testing.T, target string) *droppingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &droppingProxy{addr: l.Addr().String()}
	var conns []net.Conn
	var cmu sync.Mutex
	t.Cleanup(func() {
		l.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
	})
	go func() {
		for {
			cl, err := l.Accept()
			if err != nil {
				return
			}
			srv, err := net.Dial("tcp", target)
			if err != nil {
				cl.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, cl, srv)
			cmu.Unlock()
			go func() { // client → server, watching for EVALSHA
				buf := make([]byte, 64<<10)
				for {
					n, err := cl.Read(buf)
					if n > 0 {
						refused := false
						if bytes.Contains(bytes.ToLower(buf[:n]), []byte("evalsha")) {
							p.mu.Lock()
							if p.refuse > 0 {
								p.refuse--
								refused = true
							} else if p.armed && p.swallow == nil {
								p.swallow = cl
							}
							p.mu.Unlock()
						}
						if refused {
							cl.Write([]byte("-LOADING Redis is loading the dataset in memory\r\n"))
						} else {
							srv.Write(buf[:n])
						}
					}
					if err != nil {
						srv.Close()
						return
					}
				}
			}()
			go func() { // server → client, unless swallowed
				buf := make([]byte, 64<<10)
				for {
					n, err := srv.Read(buf)
					if n > 0 {
						p.mu.Lock()
						drop := p.swallow == cl
						p.mu.Unlock()
						if !drop {
							cl.Write(buf[:n])
						}
					}
					if err != nil {
						cl.Close()
						return
					}
				}
			}()
		}
	}()
	return p
}

// stepTwin returns a step of a test against the twin: it sets the clock to
// tm (backwards too: keys' TTLs grow, as Redis's absolute expiry would once
// the clock is behind it), decides n events of key by the script and by
// the twin, fails the test when they differ, and returns the script's
// Result.
func stepTwin(t *testing.T, clk *clock, lim *Limiter, twin *Local, key string) func(tm time.Time, n int, what string) Result {
	return func(tm time.Time, n int, what string) Result {
		t.Helper()
		clk.advance(tm.Sub(clk.now))
		got, err := lim.AllowN(context.Background(), key, n)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := twin.AllowN(tm, key, n)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: script %+v\ntwin %+v", what, got.Rules[0], want.Rules[0])
		}
		return got
	}
}

// withTwin returns a limiter of rules on a miniredis whose clock the test
// sets, and the in-process twin its answers must equal.
func withTwin(t *testing.T, rules ...Rule) (*clock, *Limiter, *Local) {
	t.Helper()
	clk, client := newClock(t)
	lim, err := NewPolicy(client, rules)
	if err != nil {
		t.Fatal(err)
	}
	twin, err := NewLocal(rules)
	if err != nil {
		t.Fatal(err)
	}
	return clk, lim, twin
}

// pipelineOnly is embedded by the tests' go-redis hooks that act on
// pipelines only: dialling and single commands pass through.
type pipelineOnly struct{}

func (pipelineOnly) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (pipelineOnly) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// commandsOnly is embedded by the tests' go-redis hooks that act on
// single commands only (a lone caller's call): dialling and pipelines
// pass through.
type commandsOnly struct{}

func (commandsOnly) DialHook(next redis.DialHook) redis.DialHook { return next }
func (commandsOnly) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// isScriptCall reports whether cmd is a script call (EVALSHA, or EVAL
// after NOSCRIPT).
func isScriptCall(cmd redis.Cmder) bool {
	name := strings.ToLower(cmd.Name())
	return name == "evalsha" || name == "eval"
}

// restartUntilHealthy restarts srv and waits until the health hook feeding
// changed reports Healthy.
func restartUntilHealthy(t *testing.T, srv *redistest.Server, changed <-chan Health) {
	t.Helper()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-changed:
		if h != Healthy {
			t.Fatalf("after restart: %v", h)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the probe never found Redis again")
	}
}

// scriptSrc is the plain source of the script of every algorithm, which
// the tests read and run directly.
var scriptSrc = allScript.src.(string)

// allowFromMany has callers goroutines each call lim.Allow on key
// attempts times, and returns how many were admitted; an error fails the
// test (and ends that goroutine's attempts).
func allowFromMany(t *testing.T, lim *Limiter, key string, callers, attempts int) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < attempts; j++ {
				r, err := lim.Allow(context.Background(), key)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return admitted.Load()
}

// viaFlushers makes a lone caller on b's default client hand its call to a
// flusher, as on a client of another kind, instead of sending it itself
// (see inlineBound): for the tests whose scene is the flushers'.
func viaFlushers(b *batcher) { b.bounded = nil }
