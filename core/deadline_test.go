package core

// Edge cases of deadlines, retries, Reset, the health probe and the clock:
// each test names the defect it guards against.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime"
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

// exec says: "The pipeline's context ends when the last of its callers stops
// waiting: go-redis then stops dialling or waiting for a connection, so a
// decision nobody waits for any more is not sent late ... to consume quota
// for a request long gone." execContext.Done returns nil, so go-redis's pool
// (which selects on ctx.Done) never sees that deadline: the pipeline waits
// for a connection up to PoolTimeout and is then sent, long after its caller
// was told the decision failed.
func TestTimedOutDecisionIsNotSentLate(t *testing.T) {
	opt := redistest.Options(t)
	opt.PoolSize, opt.PoolTimeout, opt.MaxRetries = 1, 30*time.Second, -1
	opt.ClientName = "edge-late"
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() }) // after the hold is released
	lim := newOn(t, c, FixedWindow, PerHour(5), WithTimeout(50*time.Millisecond),
		WithFailureMode(FailClosed), WithHealthCheck(0, 0), WithPrefix(fmt.Sprintf("late-%d", time.Now().UnixNano())))
	// Loaded, so that a late EVALSHA would run rather than meet NOSCRIPT
	// (whatever ran on this server before).
	loadScript(t, c)
	release := holdOnlyConnection(t, c, opt.ClientName)

	r, err := lim.Allow(context.Background(), "k")
	if !errors.Is(err, context.DeadlineExceeded) || r.Allowed {
		t.Fatalf("with the pool taken: %+v %v; want a timely denial with DeadlineExceeded", r, err)
	}
	// The caller has been answered (denied, FailClosed). Now the connection
	// frees up.
	release()
	waitBatcherIdle(t, lim.batch)
	admin := redistest.Client(t)
	if v, err := admin.Get(context.Background(), lim.keys("k")[0]).Result(); err != redis.Nil {
		t.Errorf("a decision whose caller had timed out (and been denied) was executed afterwards: key holds %q (%v)", v, err)
	}
}

// With ContextTimeoutEnabled a lone caller sends its call itself, "the
// deadline holds just the same". It does not while go-redis waits for a
// pooled connection: execContext has no Done channel, so the pool waits its
// PoolTimeout, not the decision's timeout.
func TestInlineSendHonoursTimeoutWaitingForAConnection(t *testing.T) {
	opt := redistest.Options(t)
	opt.PoolSize, opt.PoolTimeout, opt.MaxRetries = 1, time.Hour, -1
	opt.ContextTimeoutEnabled = true
	opt.ClientName = "edge-inline-pool"
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() }) // after the hold is released
	lim := newOn(t, c, GCRA, PerSecond(10), WithTimeout(50*time.Millisecond),
		WithHealthCheck(0, 0), WithPrefix(fmt.Sprintf("inline-pool-%d", time.Now().UnixNano())))
	if !lim.batch.inline {
		t.Fatal("ContextTimeoutEnabled not detected")
	}
	release := holdOnlyConnection(t, c, opt.ClientName)

	done := make(chan error, 1)
	go func() {
		_, err := lim.Allow(context.Background(), "k")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second): // 200 times the 50ms timeout
		t.Error("a decision with a 50ms timeout was still waiting after 10s (for a pooled connection)")
		release()
		<-done
	}
}

// The inline path also ignores the caller's cancellation: do promises to
// return when "ctx is done", and the queued path does, but sendInline hands
// go-redis a context that carries only the deadline.
func TestInlineSendHonoursCancel(t *testing.T) {
	stuck := redis.NewClient(&redis.Options{Addr: redistest.StuckServer(t), ContextTimeoutEnabled: true,
		MaxRetries: -1, ReadTimeout: time.Hour, WriteTimeout: time.Hour})
	defer stuck.Close()
	lim := newOn(t, stuck, GCRA, PerSecond(1), WithTimeout(time.Hour), WithHealthCheck(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := lim.Allow(ctx, "k")
		done <- err
	}()
	// Wait until the call is on its way (the inline sender holds active).
	for {
		lim.batch.mu.Lock()
		a := lim.batch.active
		lim.batch.mu.Unlock()
		if a > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a canceled caller was still waiting 10s later (inline path ignores ctx.Done)")
		stuck.Close()
		<-done
	}
}

// A caller whose own context has already run out says nothing about Redis,
// yet decide counts its DeadlineExceeded as a Redis failure: three such
// callers open the breaker, and every caller of the limiter is then decided
// by the failure mode (here: denied) while Redis is perfectly healthy.
func TestCallerDeadlineDoesNotOpenTheBreaker(t *testing.T) {
	c := redistest.Client(t)
	lim := newOn(t, c, TokenBucket, PerMinute(100), WithFailureMode(FailClosed),
		WithPrefix(fmt.Sprintf("expired-%d", time.Now().UnixNano())))
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for i := 0; i < 3; i++ {
		lim.Allow(expired, fmt.Sprintf("impatient-%d", i))
	}
	r, err := lim.Allow(context.Background(), "someone-else")
	if err != nil || !r.Allowed || lim.Health() != Healthy {
		t.Errorf("a healthy Redis after three callers with expired contexts: %+v, %v, health %v; want an admission", r, err, lim.Health())
	}
}

// pipelineGate is a go-redis hook that, once armed, lets the next pipeline
// holding an EVALSHA run in Redis and then holds its answer until opened.
type pipelineGate struct {
	pipelineOnly
	armed    chan struct{} // closed: the next EVALSHA pipeline is held
	executed chan struct{} // closed when the held pipeline has run in Redis
	open     chan struct{} // closed: the held pipeline's answer goes on
	taken    bool
}

func (g *pipelineGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		select {
		case <-g.armed:
		default:
			return err
		}
		if g.taken || len(cmds) == 0 || !strings.EqualFold(cmds[0].Name(), "evalsha") {
			return err
		}
		g.taken = true
		close(g.executed)
		<-g.open
		return err
	}
}

// The deny cache's documentation: "this limiter's own Reset clears its
// entry". A denial that Redis made before the Reset but that reaches the
// limiter after it is cached all the same, and then answers for RetryAfter
// (an hour here) although Redis, reset, would admit.
func TestDenyCacheAfterOwnReset(t *testing.T) {
	prefix := fmt.Sprintf("denyreset-%d", time.Now().UnixNano())
	ctx := context.Background()
	// Another instance of the same limiter uses up the key.
	other := newOn(t, redistest.Client(t), FixedWindow, PerHour(1), WithPrefix(prefix))
	if r, err := other.Allow(ctx, "k"); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	c := redistest.Client(t)
	gate := &pipelineGate{armed: make(chan struct{}), executed: make(chan struct{}), open: make(chan struct{})}
	c.AddHook(gate)
	lim := newOn(t, c, FixedWindow, PerHour(1), WithPrefix(prefix), WithDenyCache(100))
	close(gate.armed)

	denied := make(chan Result, 1)
	go func() {
		r, _ := lim.Allow(ctx, "k") // denied in Redis, answer held by the gate
		denied <- r
	}()
	<-gate.executed
	if err := lim.Reset(ctx, "k"); err != nil { // rides the second flusher
		t.Fatal(err)
	}
	close(gate.open)
	if r := <-denied; r.Allowed {
		t.Fatalf("the held request: %+v, want the denial Redis made before the Reset", r)
	}
	// Reset has returned: Redis holds nothing for k.
	if n := c.Exists(ctx, lim.keys("k")[0]).Val(); n != 0 {
		t.Fatalf("the key survived Reset")
	}
	r, err := lim.Allow(ctx, "k")
	if err != nil || !r.Allowed {
		t.Errorf("after Reset returned: %+v %v; the deny cache answered a denial Redis would not give", r, err)
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

// A decision is "one EVALSHA". go-redis retries a pipeline (and a command)
// whose reply timed out or whose connection died after it was written; the
// script has then already run, and would run again: one Allow consuming
// twice. sluice's scripts go out with go-redis's retries off (scriptCmd),
// and a lost reply is an error instead.
func TestDecisionIsNotExecutedTwice(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			p := startDroppingProxy(t, redistest.Options(t).Addr)
			c := redis.NewClient(&redis.Options{Addr: p.addr, ReadTimeout: 300 * time.Millisecond,
				ContextTimeoutEnabled: inline}) // default MaxRetries
			defer c.Close()
			lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(30*time.Second), WithHealthCheck(0, 0),
				WithPrefix(fmt.Sprintf("twice-%v-%d", inline, time.Now().UnixNano())))
			ctx := context.Background()
			if err := c.Ping(ctx).Err(); err != nil { // connect, and load nothing yet
				t.Fatal(err)
			}
			loadScript(t, c)
			p.mu.Lock()
			p.armed = true
			p.mu.Unlock()
			r, err := lim.Allow(ctx, "k")
			admin := redistest.Client(t)
			v, _ := admin.Get(ctx, lim.keys("k")[0]).Result()
			if err == nil && r.Remaining != 9 || fwCount(v) != 1 {
				t.Errorf("one Allow: %+v %v; Redis holds %q; want one event counted (Remaining 9, count 1)", r, err, v)
			}
		})
	}
}

// A script call that Redis refused before running it (here LOADING, as
// after a restart) is sent again, since it cannot have counted; the
// decision is then made once.
func TestScriptResentWhenItNeverRan(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			p := startDroppingProxy(t, redistest.Options(t).Addr)
			c := redis.NewClient(&redis.Options{Addr: p.addr, ContextTimeoutEnabled: inline})
			defer c.Close()
			lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(10*time.Second), WithHealthCheck(0, 0),
				WithPrefix(fmt.Sprintf("resent-%v-%d", inline, time.Now().UnixNano())))
			ctx := context.Background()
			loadScript(t, c)
			p.mu.Lock()
			p.refuse = maxSends - 1
			p.mu.Unlock()
			wantDecidedOnce(t, lim, fmt.Sprintf("one Allow after %d LOADING replies", maxSends-1))
			p.mu.Lock()
			p.refuse = maxSends
			p.mu.Unlock()
			if _, err := lim.Allow(ctx, "k"); !redis.IsLoadingError(err) {
				t.Errorf("after %d LOADING replies: %v; want the LOADING error", maxSends, err)
			}
		})
	}
}

// A failover client closes its connections to a master the sentinels have
// replaced, connections still in their handshake (HELLO) included. go-redis
// then reports the handshake's failure bare, as net.ErrClosed, and the
// script was never written: it must be sent again, not fail the call. (It
// failed calls after a Sentinel failover was over.)
func TestScriptResentWhenItsConnectionClosedInHandshake(t *testing.T) {
	// limiterClosing returns a limiter whose client's first closes
	// connections are closed before their handshake.
	limiterClosing := func(t *testing.T, inline bool, closes int32) *Limiter {
		loadScript(t, redistest.Client(t)) // every send is counted: none may go to NOSCRIPT
		var left atomic.Int32
		left.Store(closes)
		var d net.Dialer
		c := redis.NewClient(&redis.Options{
			Addr:                  redistest.Options(t).Addr,
			ContextTimeoutEnabled: inline,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				cn, err := d.DialContext(ctx, network, addr)
				if err == nil && left.Add(-1) >= 0 {
					cn.Close()
				}
				return cn, err
			},
		})
		t.Cleanup(func() { c.Close() })
		return newOn(t, c, FixedWindow, PerHour(10), WithTimeout(10*time.Second), WithHealthCheck(0, 0),
			WithPrefix(fmt.Sprintf("handshake-%v-%d", inline, time.Now().UnixNano())))
	}
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			ctx := context.Background()
			lim := limiterClosing(t, inline, maxSends-1)
			wantDecidedOnce(t, lim, fmt.Sprintf("one Allow after %d connections closed in their handshake", maxSends-1))
			lim = limiterClosing(t, inline, maxSends)
			if _, err := lim.Allow(ctx, "k"); !errors.Is(err, net.ErrClosed) {
				t.Errorf("after %d connections closed in their handshake: %v; want net.ErrClosed", maxSends, err)
			}
		})
	}
}

// wantDecidedOnce makes one Allow of key "k" on a FixedWindow limit of 10
// and checks that it succeeded and was counted exactly once.
func wantDecidedOnce(t *testing.T, lim *Limiter, what string) {
	t.Helper()
	ctx := context.Background()
	r, err := lim.Allow(ctx, "k")
	v, _ := redistest.Client(t).Get(ctx, lim.keys("k")[0]).Result()
	if err != nil || r.Remaining != 9 || fwCount(v) != 1 {
		t.Errorf("%s: %+v %v; Redis holds %q; want it decided once (Remaining 9, count 1)", what, r, err, v)
	}
}

// Once the breaker opens, recover probes until Redis answers. A client that
// has been closed never answers again ("redis: client is closed"), so the
// probe goroutine, holding the whole Limiter, runs forever: a goroutine
// leak per limiter dropped while unhealthy (shutdown, a limiter per tenant).
func TestBreakerProbeStopsWhenClientIsClosed(t *testing.T) {
	c := redistest.RefusedClient(t)
	lim := newOn(t, c, GCRA, PerSecond(1), WithHealthCheck(1, 50*time.Millisecond))
	lim.Allow(context.Background(), "k")
	if lim.Health() != Unhealthy {
		t.Fatal("the breaker did not open")
	}
	c.Close()
	probing := func() bool {
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "core.(*health).recover")
	}
	for deadline := time.Now().Add(5 * time.Second); probing(); {
		if time.Now().After(deadline) {
			t.Error("the health probe still runs 5s after the client was closed (probes every 50ms, forever)")
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sliding_window_log.lua names members "<time>:<c+i>", c the events in the
// window, trusting that "c only grows while the time stays the same". After
// the clock steps back to a time that already has members, c can be smaller
// than it was there (a write in between dropped more old events than it
// added), the new member's name exists already, ZADD adds nothing, and the
// event is not recorded: Redis admits where its twin (and the limit) denies,
// and every further request at that instant (a whole batch) is admitted too.
func TestSlidingLogClockStepBack(t *testing.T) {
	clk, lim, twin := withTwin(t, Rule{Name: "log", Algorithm: SlidingWindowLog, Limit: PerSecond(3)})
	ctx := context.Background()
	T := start.Add(time.Hour)
	at := func(tm time.Time) {
		clk.m.SetTime(tm)
		clk.now = tm
	}
	step := func(tm time.Time, what string) (Result, Result) {
		at(tm)
		got, err := lim.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		want, _ := twin.AllowN(tm, "k", 1)
		return got, want
	}
	step(T.Add(-20*time.Microsecond), "T-20µs")
	step(T.Add(-10*time.Microsecond), "T-10µs")
	step(T, "T") // member "T:2"
	// Later: the two oldest have left; one more event.
	step(T.Add(-10*time.Microsecond+time.Second), "T-10µs+1s")
	// The clock steps back to T: the window holds "T:2" and the later event,
	// so c = 2, and the new member is "T:2" again.
	for i := 0; i < 3; i++ {
		got, want := step(T, "T again")
		if got.Allowed != want.Allowed || got.Remaining != want.Remaining {
			t.Fatalf("request %d after the clock stepped back: script %+v\ntwin %+v", i, got, want)
		}
	}
}

// After Redis's clock steps back into an earlier window, a
// SlidingWindowCounter key holds a later window's counts: the script
// decides as at that window's start, and counts every duration (the TTL,
// ResetAfter, RetryAfter) from now, so the count weighs for its two whole
// periods, as in the twin. (It used to count the TTL two periods from now,
// which ended before the later window's next one: the count was forgotten
// early, and the script and its twin then disagreed.)
func TestSlidingCounterClockStepBackMatchesTwin(t *testing.T) {
	clk, lim, twin := withTwin(t, Rule{Name: "swc", Algorithm: SlidingWindowCounter, Limit: PerSecond(997)})
	W := start.Truncate(time.Second).Add(time.Hour) // a window's start
	step := stepTwin(t, clk, lim, twin, "k")
	step(W.Add(500*time.Millisecond), 800, "W+0.5s, 800 events")
	step(W.Add(-300*time.Millisecond), 1, "the clock steps back to W-0.3s")
	// In the next window, the 801 events of window W still weigh 0.2 of
	// their count: 997 - 160.2, less the one taken, is 835.
	if r := step(W.Add(1800*time.Millisecond), 1, "W+1.8s"); r.Remaining != 835 {
		t.Errorf("W+1.8s: Remaining %d; want 835, window W's count still weighing", r.Remaining)
	}
}

// After Redis's clock steps back into an earlier window, a FixedWindow key
// holds a later window's count (its tag one ahead): the script keeps
// counting in that later window, taking with INCRBY and giving back what
// it denies, as the twin does; the next window starts over.
func TestFixedWindowClockStepBackMatchesTwin(t *testing.T) {
	clk, lim, twin := withTwin(t, Rule{Name: "fw", Algorithm: FixedWindow, Limit: PerSecond(10)})
	W := start.Truncate(time.Second).Add(time.Hour) // a window's start
	step := stepTwin(t, clk, lim, twin, "k")
	step(W.Add(500*time.Millisecond), 8, "W+0.5s, 8 events")
	if r := step(W.Add(-300*time.Millisecond), 1, "the clock steps back to W-0.3s"); !r.Allowed || r.Remaining != 1 {
		t.Errorf("W-0.3s: %+v; want admitted in window W, 1 left", r)
	}
	if r := step(W.Add(-200*time.Millisecond), 2, "W-0.2s, 2 events"); r.Allowed || r.Remaining != 1 {
		t.Errorf("W-0.2s: %+v; want denied in window W, 1 left", r)
	}
	step(W.Add(-100*time.Millisecond), 1, "W-0.1s, the last event of window W")
	if r := step(W.Add(1100*time.Millisecond), 1, "W+1.1s"); !r.Allowed || r.Remaining != 9 {
		t.Errorf("W+1.1s: %+v; want the next window started over, 9 left", r)
	}
}

// After Redis's clock steps back behind a meter's state, the meter counts
// the step as time still to run before it refills (or drains): a
// denial's RetryAfter and ResetAfter count from now, and a key written
// meanwhile keeps its state as long as that state needs (it used to
// expire as much earlier as the clock had stepped back, forgetting a
// debt). Script and twin agree throughout.
func TestBucketsAcrossClockStepBack(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, GCRA} {
		t.Run(string(alg), func(t *testing.T) {
			clk, lim, twin := withTwin(t, Rule{Name: "b", Algorithm: alg, Limit: PerSecond(10)})
			T := start.Truncate(time.Second).Add(time.Hour)
			empty, half := stepTwin(t, clk, lim, twin, "empty"), stepTwin(t, clk, lim, twin, "half")
			// Emptied at T, then the clock steps back 5s: nothing comes back
			// before T + 100ms, 5.1s from then.
			empty(T, 10, "T, the whole burst")
			if r := empty(T.Add(-5*time.Second), 1, "T-5s"); r.Allowed || r.RetryAfter != 5100*time.Millisecond {
				t.Errorf("T-5s: %+v; want denied, RetryAfter 5.1s", r)
			}
			if r := empty(T.Add(100*time.Millisecond), 1, "T+100ms"); !r.Allowed {
				t.Errorf("T+100ms: %+v; want one event admitted", r)
			}
			// Half used at T, back to untouched at T + 500ms; 5s before T the
			// meter holds 5.5s of debt: one event fits 4.6s on, at
			// T - 400ms, and the meter is back to untouched 5.5s on.
			half(T, 5, "T, half the burst")
			if r := half(T.Add(-5*time.Second), 1, "T-5s"); r.Allowed || r.RetryAfter != 4600*time.Millisecond || r.ResetAfter != 5500*time.Millisecond {
				t.Errorf("T-5s: %+v; want denied, RetryAfter 4.6s, ResetAfter 5.5s", r)
			}
			if r := half(T.Add(-400*time.Millisecond), 1, "T-400ms"); !r.Allowed || r.Remaining != 0 {
				t.Errorf("T-400ms: %+v; want one event admitted, none left", r)
			}
		})
	}
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
