package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// waitFor polls cond until it holds, or fails the test after 20s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// fwCount returns the count a FixedWindow key's value v holds, in either
// form (see lua/fixed_window.lua): an integer tag × 2^32 + count, or
// "<window>:<count>"; -1 when v is neither (a missing key reads "").
func fwCount(v string) int64 {
	if x, err := strconv.ParseInt(v, 10, 64); err == nil && x>>32 > 0 {
		return x & (1<<32 - 1)
	}
	if _, c, ok := strings.Cut(v, ":"); ok {
		if n, err := strconv.ParseInt(c, 10, 64); err == nil {
			return n
		}
	}
	return -1
}

// allowAsync starts lim.Allow(ctx, key) on a goroutine of its own; its
// error goes to errs.
func allowAsync(lim *Limiter, ctx context.Context, key string, errs chan<- error) {
	go func() {
		_, err := lim.Allow(ctx, key)
		errs <- err
	}()
}

// batcherState reads b's counters under b.mu.
func batcherState(b *batcher) (active, pending, inflight int, watching bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.active, len(b.pending), b.inflight, b.watching
}

// loadScript loads the policy script, so that a test's first EVALSHA is
// not answered NOSCRIPT.
func loadScript(t *testing.T, c redis.Scripter) {
	t.Helper()
	if err := c.ScriptLoad(context.Background(), scriptSrc).Err(); err != nil {
		t.Fatal(err)
	}
}

// waitPending waits until n calls are queued in b.
func waitPending(t *testing.T, b *batcher, n int, what string) {
	t.Helper()
	waitFor(t, what, func() bool {
		_, pending, _, _ := batcherState(b)
		return pending == n
	})
}

func isEvalSha(cmds []redis.Cmder) bool {
	return len(cmds) > 0 && strings.EqualFold(cmds[0].Name(), "evalsha")
}

// holdAfterRefusal is a go-redis hook: the first EVALSHA pipeline that
// comes back with LOADING (it never ran) is held, after its reply, until
// release is closed.
type holdAfterRefusal struct {
	pipelineOnly
	taken   atomic.Bool
	refused chan struct{}
	release chan struct{}
}

func (h *holdAfterRefusal) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if isEvalSha(cmds) && redis.IsLoadingError(cmds[0].Err()) && h.taken.CompareAndSwap(false, true) {
			close(h.refused)
			<-h.release
		}
		return err
	}
}

// A script call that Redis refused before running it (LOADING) is sent
// again only for the callers still waiting. Once every caller of the batch
// has given up (here, told context.Canceled), the call is not resent, or the
// decision would count for a request whose caller was told it failed (and,
// under FailOpen, admitted it anyway).
func TestNoResendOnceEveryCallerGaveUp(t *testing.T) {
	p := startDroppingProxy(t, redistest.Options(t).Addr)
	c := redis.NewClient(&redis.Options{Addr: p.addr})
	defer c.Close()
	hook := &holdAfterRefusal{refused: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(hook)
	lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(30*time.Second), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("gaveup-%d", time.Now().UnixNano())))
	bg := context.Background()
	loadScript(t, c)
	p.mu.Lock()
	p.refuse = 1 // the first EVALSHA is answered LOADING, without reaching Redis
	p.mu.Unlock()

	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	done := make(chan error, 1)
	allowAsync(lim, ctx, "k", done)
	select {
	case <-hook.refused:
	case <-time.After(20 * time.Second):
		t.Fatal("the script call was never refused")
	}
	cancel() // the caller gives up: it is the only caller of the batch
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller: %v, want context.Canceled", err)
	}
	close(hook.release)
	waitBatcherIdle(t, lim.batch)

	v, err := redistest.Client(t).Get(bg, lim.keys("k")[0]).Result()
	if err != redis.Nil {
		t.Errorf("the caller was told context.Canceled, then its decision was resent and counted: key holds %q (%v)", v, err)
	}
}

// The watchdog fires at the earliest deadline of the calls that wait,
// though calls do not always come in deadline order: the health probe's
// PING waits with its own 1s context, and a Reset with the limiter's 50ms
// timeout queued after it must still end after about 50ms, not 1s.
func TestWatchdogFiresAtTheEarliestDeadline(t *testing.T) {
	stuck := redistest.StuckServer(t)
	c := redis.NewClient(&redis.Options{Addr: stuck, MaxRetries: -1, ReadTimeout: time.Minute})
	defer c.Close()
	lim := newOn(t, c, GCRA, PerSecond(1), WithTimeout(50*time.Millisecond), WithHealthCheck(1, 50*time.Millisecond))
	var probeMu sync.Mutex
	var probeDeadline time.Time // of the first probe's PING
	ping := lim.health.probe
	lim.health.probe = func(ctx context.Context) error {
		if d, ok := ctx.Deadline(); ok {
			probeMu.Lock()
			if probeDeadline.IsZero() {
				probeDeadline = d
			}
			probeMu.Unlock()
		}
		return ping(ctx)
	}
	bg := context.Background()
	// One failed decision opens the breaker; the probe (health.recover)
	// then sends a PING with a 1s context, which hangs.
	if _, err := lim.Allow(bg, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first decision on a hung Redis: %v", err)
	}
	if lim.Health() != Unhealthy {
		t.Fatal("the breaker did not open")
	}
	waitFor(t, "the probe's PING in flight", func() bool {
		_, _, inflight, watching := batcherState(lim.batch)
		return inflight >= 2 && watching // the hung decision and the probe
	})
	start := time.Now()
	err := lim.Reset(bg, "k")
	end := time.Now()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Reset on a hung Redis: %v, want DeadlineExceeded", err)
	}
	// Armed for the probe's deadline, the watchdog would end the Reset's
	// wait no earlier than that: the test needs no margin of time.
	probeMu.Lock()
	deadline := probeDeadline
	probeMu.Unlock()
	if deadline.IsZero() {
		t.Fatal("the probe's PING had no deadline")
	}
	if !end.Before(deadline) {
		t.Errorf("Reset with a 50ms timeout returned after %v, at or after the probe's deadline: the watchdog was armed for it", end.Sub(start))
	}
}

// holdPipelines is a go-redis hook: while holding, every EVALSHA pipeline
// is held after its reply has been read (its connection is back in the
// pool) until open is closed.
type holdPipelines struct {
	pipelineOnly
	mu      sync.Mutex
	holding bool
	held    int
	open    chan struct{}
}

func (h *holdPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !isEvalSha(cmds) {
			return err
		}
		h.mu.Lock()
		hold := h.holding
		if hold {
			h.held++
		}
		h.mu.Unlock()
		if hold {
			<-h.open
		}
		return err
	}
}

// release stops holding and lets every held pipeline go on.
func (h *holdPipelines) release() {
	h.mu.Lock()
	h.holding = false
	h.mu.Unlock()
	close(h.open)
}

func (h *holdPipelines) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// A second flusher waits until as many calls are pending as are in flight
// (mayGo), but not behind a pipeline that hangs on a dead connection (here
// its replies are dropped; go-redis gives up at ReadTimeout, a minute):
// once that batch has been out for stallAfter, a lone decision goes on
// another connection, where Redis answers, instead of waiting out its
// timeout.
func TestHungPipelineDoesNotHoldBackOthers(t *testing.T) {
	p := startDroppingProxy(t, redistest.Options(t).Addr)
	c := redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1, ReadTimeout: time.Minute})
	defer c.Close()
	gate := &holdPipelines{holding: true, open: make(chan struct{})}
	c.AddHook(gate)
	lim := newOn(t, c, FixedWindow, PerHour(100), WithTimeout(3*time.Second), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("hung-%d", time.Now().UnixNano())))
	b := lim.batch
	setFlushers(b, 2) // the scene below: both flushers busy
	bg := context.Background()
	loadScript(t, c)
	results := make(chan error, 4)
	allow := func(key string) { allowAsync(lim, bg, key, results) }
	// Two flushers, each with one decision answered and held by the gate.
	allow("q1")
	waitFor(t, "the first pipeline", func() bool { return gate.count() == 1 })
	allow("q2")
	waitFor(t, "the second pipeline", func() bool { return gate.count() == 2 })
	// Two more queue meanwhile; both flushers are busy.
	allow("q3")
	allow("q4")
	waitPending(t, b, 2, "two queued decisions")
	// The next EVALSHA's connection goes dead (no replies), then the
	// flushers go on: one sends q3 and q4 together on it.
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
	gate.release()
	for i := 0; i < 2; i++ {
		if err := <-results; err != nil {
			t.Fatalf("q1/q2: %v", err)
		}
	}
	waitFor(t, "q3 and q4 in flight on the dead connection, one flusher left", func() bool {
		active, pending, inflight, _ := batcherState(b)
		return active == 1 && pending == 0 && inflight == 2
	})

	// Redis answers on any other connection; a second flusher is free.
	start := time.Now()
	if _, err := lim.Allow(bg, "q5"); err != nil {
		t.Errorf("a lone decision while another pipeline hangs: %v after %v; want it sent on another connection", err, time.Since(start))
	}
}

// trap is a dialer for a failover client: once armed, the first
// connection to target that writes an EVALSHA stalls until the client
// itself closes it. It stalls at its next read (afterDeadline false: the
// command reaches Redis and runs, its reply waits in the socket, as for a
// client slow to read it) or when go-redis sets the read deadline just
// after the write (afterDeadline true: as for a flusher descheduled between
// writing the pipeline and reading it).
type trap struct {
	target        string
	afterDeadline bool
	written       chan struct{}
	engaged       atomic.Bool // the stalled call went on after the close

	mu    sync.Mutex
	armed bool
	held  *trapConn
}

type trapConn struct {
	net.Conn
	t      *trap
	hold   atomic.Bool
	closed chan struct{}
	once   sync.Once
}

func newTrap(target string, afterDeadline bool) *trap {
	return &trap{target: target, afterDeadline: afterDeadline, written: make(chan struct{})}
}

func (t *trap) arm() {
	t.mu.Lock()
	t.armed = true
	t.mu.Unlock()
}

func (t *trap) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil || addr != t.target {
		return c, err
	}
	return &trapConn{Conn: c, t: t, closed: make(chan struct{})}, nil
}

func (c *trapConn) Write(b []byte) (int, error) {
	t := c.t
	t.mu.Lock()
	if t.armed && t.held == nil && bytes.Contains(bytes.ToLower(b), []byte("evalsha")) {
		t.held = c
		c.hold.Store(true)
		defer close(t.written)
	}
	t.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *trapConn) Read(b []byte) (int, error) {
	if !c.t.afterDeadline && c.hold.Load() {
		<-c.closed
		c.t.engaged.Store(true)
	}
	return c.Conn.Read(b)
}

func (c *trapConn) SetReadDeadline(tm time.Time) error {
	if c.t.afterDeadline && c.hold.CompareAndSwap(true, false) {
		<-c.closed
		c.t.engaged.Store(true)
	}
	return c.Conn.SetReadDeadline(tm)
}

func (c *trapConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// A decision that ran on the old master and reached the replica before a
// failover, whose reply the client had not read when the sentinels named
// the new master, fails when the failover client closes its connection
// (net.ErrClosed on the read). It is not resent: on the new master it
// would count twice.
func TestLostReplyAcrossFailoverCountsOnce(t *testing.T) {
	s := redistest.StartSentinel(t)
	decideAcrossFailover(t, s, newTrap(s.Master.Addr, false))
}

// decideAcrossFailover makes one decision on a failover client whose
// connections to the master trap makes, waits until the decision has
// reached the replica, fails the master over to it, and checks that the
// new master counted the decision once. It is skipped when the trap was
// never sprung.
func decideAcrossFailover(t *testing.T, s *redistest.Sentinel, trap *trap) {
	t.Helper()
	ctx := context.Background()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.MasterName, SentinelAddrs: []string{s.Addr},
		Dialer: trap.dial, ReadTimeout: time.Minute,
	})
	defer c.Close()
	lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(time.Minute), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("failover-once-%d", time.Now().UnixNano())))
	if r, err := lim.Allow(ctx, "warm-up"); err != nil || !r.Allowed {
		t.Fatalf("warm-up: %+v %v", r, err)
	}
	trap.arm()
	type outcome struct {
		r   Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := lim.Allow(ctx, "k")
		done <- outcome{r, err}
	}()
	select {
	case <-trap.written:
	case <-time.After(20 * time.Second):
		t.Fatal("the decision was never sent")
	}
	// It ran on the master, and reached the replica.
	key := lim.keys("k")[0]
	replica := s.Node(s.Replica.Addr)
	waitFor(t, "the decision on the replica", func() bool {
		v, _ := replica.Get(ctx, key).Result()
		return fwCount(v) == 1
	})
	if err := s.SentinelClient(t).Failover(ctx, s.MasterName).Err(); err != nil && !strings.HasPrefix(err.Error(), "INPROG") {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	var o outcome
	select {
	case o = <-done:
	case <-time.After(40 * time.Second):
		t.Fatal("the decision never returned")
	}
	if err := s.WaitMaster(ctx, s.Replica.Addr); err != nil {
		t.Fatal(err)
	}
	if !trap.engaged.Load() {
		t.Skip("the trapped connection was not closed under the call")
	}
	v, err := replica.Get(ctx, key).Result()
	if err != nil || fwCount(v) != 1 {
		t.Errorf("one Allow (answered %+v, %v) across a failover: the new master holds %q (%v); want one event counted, not two",
			o.r, o.err, v, err)
	}
}

// pipelineArgs is the text of a pipeline's commands' arguments.
func pipelineArgs(cmds []redis.Cmder) string {
	var sb strings.Builder
	for _, c := range cmds {
		fmt.Fprint(&sb, c.Args(), " ")
	}
	return sb.String()
}

// pipeHook is a go-redis hook calling before and after (when set) around
// every pipeline, with the text of its commands' arguments.
type pipeHook struct {
	pipelineOnly
	before, after func(args string)
}

func (h *pipeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		args := pipelineArgs(cmds)
		if h.before != nil {
			h.before(args)
		}
		err := next(ctx, cmds)
		if h.after != nil {
			h.after(args)
		}
		return err
	}
}

// A flusher that returns while another batch is in flight, leaving what is
// pending to that batch (mayGo), arms the watchdog for the moment that
// batch counts as stalled (holdBack): if it hangs, what is pending goes on
// another connection instead of waiting behind it without end.
func TestFlusherExitDoesNotStrandPending(t *testing.T) {
	for trial := 0; trial < 20; trial++ {
		if strandTrial(t, trial) {
			return
		}
	}
	t.Skip("never caught a flusher leaving a call behind a fresh batch")
}

func strandTrial(t *testing.T, trial int) (hit bool) {
	c := redistest.Client(t)
	relA, relB1, relB := make(chan struct{}), make(chan struct{}), make(chan struct{})
	aHeld, b1Held := make(chan struct{}), make(chan struct{})
	var released sync.Once
	releaseB := func() { released.Do(func() { close(relB) }) }
	var lim *Limiter
	results := make(chan string, 8)
	var launched atomic.Int32 // callers started (one by the hook)
	received := int32(0)
	// Every caller has returned before the trial does: none may report to
	// a finished test. (Deferred first, so it runs after releaseB.)
	defer func() {
		for ; received < launched.Load(); received++ {
			<-results
		}
	}()
	defer releaseB()
	allow := func(key string) {
		launched.Add(1)
		go func() {
			if _, err := lim.Allow(context.Background(), key); err != nil {
				t.Errorf("%s: %v", key, err)
			}
			results <- key
		}()
	}
	mark := func(k string) string { return fmt.Sprintf("{%s-%d}", k, trial) }
	var sent atomic.Int64 // when the hung batch was sent
	c.AddHook(&pipeHook{
		before: func(args string) {
			if !strings.Contains(args, mark("b2")) {
				return
			}
			sent.Store(time.Now().UnixNano())
			// The hung batch is out: c queues behind it, then the
			// flusher of a returns.
			allow(fmt.Sprintf("c-%d", trial))
			for {
				_, pending, _, _ := batcherState(lim.batch)
				if pending == 1 {
					break
				}
				time.Sleep(10 * time.Microsecond)
			}
			close(relA)
			<-relB
		},
		after: func(args string) {
			switch {
			case strings.Contains(args, mark("a")):
				close(aHeld)
				<-relA
			case strings.Contains(args, mark("b1")):
				close(b1Held)
				<-relB1
			}
		},
	})
	lim = newOn(t, c, FixedWindow, PerHour(100), WithTimeout(0), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("strand-%d", time.Now().UnixNano())))
	b := lim.batch
	setFlushers(b, 2) // a's and b1's: b2 and b3 wait for one of them
	loadScript(t, c)
	allow(fmt.Sprintf("a-%d", trial))
	<-aHeld
	allow(fmt.Sprintf("b1-%d", trial)) // the second flusher
	<-b1Held
	allow(fmt.Sprintf("b2-%d", trial))
	allow(fmt.Sprintf("b3-%d", trial))
	waitPending(t, b, 2, "b2 and b3 queued")
	close(relB1) // the second flusher sends b2 and b3 together: they hang
	// a's flusher returns; b1 and a are answered.
	for i := 0; i < 2; i++ {
		<-results
		received++
	}
	waitFor(t, "a's flusher done", func() bool {
		active, _, _, _ := batcherState(b)
		return active == 1
	})
	_, pending, _, watching := batcherState(b)
	if pending == 0 { // a's flusher took c: the batch was stalled already
		t.Logf("trial %d: a's flusher sent c", trial)
		releaseB()
		waitBatcherIdle(t, b)
		return false
	}
	t.Logf("trial %d: c left pending behind the batch sent %v ago; watchdog armed: %v",
		trial, time.Since(time.Unix(0, sent.Load())), watching)
	select {
	case k := <-results:
		received++
		t.Logf("%s answered while the batch hangs", k)
	case <-time.After(3 * time.Second):
		t.Errorf("a decision left pending behind a hung batch, with a flusher free: not sent after 3s (stallAfter is %v)", stallAfter)
	}
	releaseB()
	waitBatcherIdle(t, b)
	return true
}

// The watchdog fires at the earliest deadline, which is the caller's own
// when its context ends before the limiter's timeout, racing the context's
// own timer. Either way the caller is told its context's error, and decide
// counts nothing against Redis's health for a caller that merely ran out of
// its own time.
func TestOwnDeadlineNotCountedAgainstHealth(t *testing.T) {
	opt := redistest.Options(t)
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	defer c.Close()
	gate := &holdPipelines{holding: true, open: make(chan struct{})}
	c.AddHook(gate)
	defer gate.release()
	lim := newOn(t, c, GCRA, PerSecond(1000), WithTimeout(time.Minute), WithHealthCheck(1<<30, 0),
		WithPrefix(fmt.Sprintf("ctxdl-%d", time.Now().UnixNano())))
	bg := context.Background()
	loadScript(t, c)
	for i := 0; i < 400; i++ {
		ctx, cancel := context.WithTimeout(bg, 2*time.Millisecond)
		_, err := lim.Allow(ctx, fmt.Sprintf("k%d", i%8))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d: %v, want DeadlineExceeded", i, err)
		}
		if n := lim.health.failures.Load(); n > 0 {
			t.Fatalf("call %d: a caller past its own context's deadline (the limiter's timeout is a minute) counted %d failure(s) against Redis's health", i, n)
		}
	}
}

// go-redis sets the read deadline after writing the pipeline: a connection
// the failover client closes in between fails the call with a "set"
// OpError wrapping net.ErrClosed, after the script was written and ran on
// the old master. It is not resent: on the new master, where the write
// arrived by replication, it would count twice.
func TestClosedAfterWriteIsNotResent(t *testing.T) {
	s := redistest.StartSentinel(t)
	decideAcrossFailover(t, s, newTrap(s.Master.Addr, true))
}

// DELs and PINGs go in a pipeline of their own, sent before the scripts,
// which are grouped after it of the calls still waiting: a decision whose
// caller stopped waiting during that round trip (and was told it failed,
// and under FailOpen admitted) is not sent, though another caller of its
// batch still waits.
func TestDecisionNotSentAfterItsCallerLeftBehindDel(t *testing.T) {
	c := redistest.Client(t)
	gate := &holdPipelines{holding: true, open: make(chan struct{})}
	delHeld, delRelease := make(chan struct{}), make(chan struct{})
	var delOnce sync.Once
	c.AddHook(gate)
	c.AddHook(&pipeHook{before: func(args string) {
		if strings.HasPrefix(args, "[del ") {
			delOnce.Do(func() { close(delHeld) })
			<-delRelease
		}
	}})
	lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(0), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("delfirst-%d", time.Now().UnixNano())))
	b := lim.batch
	setFlushers(b, 2) // the scene below: both flushers busy
	bg := context.Background()
	loadScript(t, c)
	errs := make(chan error, 8)
	allow := func(ctx context.Context, key string) { allowAsync(lim, ctx, key, errs) }
	// Both flushers busy, each with a decision held by the gate.
	allow(bg, "x1")
	waitFor(t, "the first pipeline", func() bool { return gate.count() == 1 })
	allow(bg, "x2")
	waitFor(t, "the second pipeline", func() bool { return gate.count() == 2 })
	// A Reset and two decisions queue: one whose caller gives up once the
	// DEL is held, one whose caller waits for its answer.
	resetDone := make(chan error, 1)
	go func() { resetDone <- lim.Reset(bg, "r") }()
	short, cancel := context.WithCancel(bg)
	defer cancel()
	shortDone := make(chan error, 1)
	allowAsync(lim, short, "short", shortDone)
	allow(bg, "long")
	waitPending(t, b, 3, "three calls queued")
	// One flusher takes all three; its DEL pipeline is slow.
	gate.release()
	<-delHeld
	cancel()
	err := <-shortDone
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the short decision, canceled with the DEL held: %v", err)
	}
	t.Logf("the caller of the short decision was told: %v", err)
	close(delRelease)
	if err := <-resetDone; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	waitBatcherIdle(t, b)
	if v, err := redistest.Client(t).Get(bg, lim.keys("short")[0]).Result(); err != redis.Nil {
		t.Errorf("a decision whose caller had been told %q was sent afterwards, behind the DEL pipeline, and counted: key holds %q (%v)",
			"context canceled", v, err)
	}
}

// A caller that stops waiting by canceling its context ends its batch's
// context when no other caller of the batch waits (endIdleSends): the
// pipeline, waiting for a pooled connection, gives up, and the decision is
// not sent and counted after its only caller was told context.Canceled
// (and, under FailOpen, admitted).
func TestCanceledDecisionIsNotSentLate(t *testing.T) {
	opt := redistest.Options(t)
	opt.PoolSize, opt.PoolTimeout, opt.MaxRetries = 1, time.Minute, -1
	opt.ClientName = "cancel-late"
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() }) // after the hold is released
	lim := newOn(t, c, FixedWindow, PerHour(5), WithTimeout(time.Minute), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("cancel-late-%d", time.Now().UnixNano())))
	bg := context.Background()
	loadScript(t, c)
	release := holdOnlyConnection(t, c, opt.ClientName)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	done := make(chan error, 1)
	allowAsync(lim, ctx, "k", done)
	// The flusher has taken the decision and waits for the connection.
	waitFor(t, "the decision in flight", func() bool {
		_, _, inflight, _ := batcherState(lim.batch)
		return inflight == 1
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the canceled caller: %v", err)
	}
	release()
	waitBatcherIdle(t, lim.batch)
	if v, err := redistest.Client(t).Get(bg, lim.keys("k")[0]).Result(); err != redis.Nil {
		t.Errorf("a decision whose only caller had been told context.Canceled was sent afterwards: key holds %q (%v)", v, err)
	}
}

// A decision whose context has ended before the call is never sent: it
// fails with the context's error, and nothing is counted in Redis. (It
// used to be queued, and a flusher could send it, even answer it before
// its caller looked at the context: a request whose client had gone was
// admitted now and then. With four busy loops beside it, this test failed
// 10 of 200 runs before, none after.)
func TestEndedContextIsNeverSent(t *testing.T) {
	m := miniredis.RunT(t) // in process: an answer can come back at once
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	lim := newOn(t, c, FixedWindow, PerHour(1<<20), WithTimeout(time.Minute), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("ended-%d", time.Now().UnixNano())))
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 2000; i++ {
		if r, err := lim.Allow(gone, "k"); !errors.Is(err, context.Canceled) {
			t.Fatalf("call %d with its context canceled: %+v, %v; want context.Canceled", i, r, err)
		}
	}
	waitBatcherIdle(t, lim.batch)
	if v, err := c.Get(context.Background(), lim.keys("k")[0]).Result(); err != redis.Nil {
		t.Errorf("decisions whose context had ended were sent: key holds %q (%v)", v, err)
	}
}

// With ContextTimeoutEnabled, go-redis ends the pipeline's read at the
// batch's latest deadline: for a lone caller, its own context's. The
// answer ("i/o timeout") can arrive before the context's own timer has set
// ctx.Err(); decide still counts nothing against Redis's health for a
// caller past its own deadline, or enough impatient callers would open the
// breaker on a healthy Redis.
func TestOwnDeadlineAnswerNotCountedAgainstHealth(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redistest.StuckServer(t), ContextTimeoutEnabled: true,
		MaxRetries: -1, ReadTimeout: time.Minute})
	defer c.Close()
	lim := newOn(t, c, GCRA, PerSecond(1000), WithTimeout(time.Minute), WithHealthCheck(1<<30, 0))
	for i := 0; i < 200; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		_, err := lim.Allow(ctx, "k")
		cancel()
		if err == nil {
			t.Fatalf("call %d answered by a server that never answers", i)
		}
		if n := lim.health.failures.Load(); n > 0 {
			t.Fatalf("call %d (%v): a caller past its own context's deadline counted %d failure(s) against Redis's health", i, err, n)
		}
	}
}

// countScripts is a go-redis hook counting the script calls sent as single
// commands (the inline path).
type countScripts struct{ n atomic.Int32 }

func (h *countScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := strings.ToLower(cmd.Name()); name == "evalsha" || name == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *countScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The inline path keeps to maxSends as the batched resend does: after
// maxSends-1 refusals (LOADING, as while Redis loads its data after a
// restart that also lost the script), an EVALSHA answered NOSCRIPT is the
// last send.
func TestInlineSendsAtMostMaxSends(t *testing.T) {
	p := startDroppingProxy(t, redistest.Options(t).Addr)
	c := redis.NewClient(&redis.Options{Addr: p.addr, ContextTimeoutEnabled: true})
	defer c.Close()
	count := &countScripts{}
	c.AddHook(count)
	lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(10*time.Second), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("inline-sends-%d", time.Now().UnixNano())))
	if !lim.batch.inline {
		t.Fatal("ContextTimeoutEnabled not detected")
	}
	bg := context.Background()
	if err := c.ScriptFlush(bg).Err(); err != nil { // the fourth send meets NOSCRIPT
		t.Fatal(err)
	}
	p.mu.Lock()
	p.refuse = maxSends - 1
	p.mu.Unlock()
	_, err := lim.Allow(bg, "k")
	if n := count.n.Load(); n > maxSends {
		t.Errorf("one decision sent %d times (%v); maxSends is %d", n, err, maxSends)
	}
}

// A DEL (Reset) or a PING is answered as soon as its own pipeline returns,
// not after the scripts of its batch: a slow or hung script pipeline must
// not turn a Reset that has been done into a timeout (or keep the health
// probe's answered PING from reopening the limiter).
func TestDelAnsweredBeforeTheScripts(t *testing.T) {
	c := redistest.Client(t)
	var mu sync.Mutex
	holds := map[string]chan struct{}{}
	hold := func(mark string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		ch := make(chan struct{})
		holds[mark] = ch
		return ch
	}
	held := make(chan string, 8)
	c.AddHook(&pipeHook{after: func(args string) {
		mu.Lock()
		var ch chan struct{}
		var name string
		for m, h := range holds {
			if strings.Contains(args, m) {
				ch, name = h, m
			}
		}
		mu.Unlock()
		if ch != nil {
			held <- name
			<-ch
		}
	}})
	lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(10*time.Second), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("delbehind-%d", time.Now().UnixNano())))
	b := lim.batch
	setFlushers(b, 2) // the scene below: both flushers busy
	bg := context.Background()
	loadScript(t, c)
	relX1, relX2, relLong := hold("{x1}"), hold("{x2}"), hold("{long}")
	defer close(relLong)
	errs := make(chan error, 4)
	allow := func(key string) { allowAsync(lim, bg, key, errs) }
	// Both flushers busy, each held after its reply.
	allow("x1")
	<-held
	allow("x2")
	<-held
	// A Reset and a decision queue together.
	key := lim.keys("r")[0]
	if err := c.Set(bg, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	resetDone := make(chan error, 1)
	go func() { resetDone <- lim.Reset(bg, "r") }()
	allow("long")
	waitPending(t, b, 2, "the Reset and the decision queued")
	close(relX1)
	close(relX2)
	// One flusher sends the DEL, then the decision, whose pipeline is held.
	select {
	case m := <-held:
		if m != "{long}" {
			t.Fatalf("held %s", m)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the decision queued with the Reset was never sent")
	}
	if n := c.Exists(bg, key).Val(); n != 0 {
		t.Fatal("the DEL did not run before the scripts")
	}
	if err := <-resetDone; err != nil {
		t.Errorf("Reset whose DEL ran and was answered: %v", err)
	}
}

// A denial that Redis decided before a Reset's DEL ran (here a request
// sent on the other flusher while the DEL's pipeline was on its way) is not
// left in the deny cache once Reset returns: the limiter would answer it
// for up to RetryAfter, although Redis, reset, admits.
func TestDenyCacheNotRefilledDuringReset(t *testing.T) {
	prefix := fmt.Sprintf("deny-during-reset-%d", time.Now().UnixNano())
	ctx := context.Background()
	c := redistest.Client(t)
	delHeld, delRelease := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.AddHook(&pipeHook{before: func(args string) {
		if strings.HasPrefix(args, "[del ") {
			once.Do(func() {
				close(delHeld)
				<-delRelease
			})
		}
	}})
	lim := newOn(t, c, FixedWindow, PerHour(1), WithPrefix(prefix), WithDenyCache(100), WithHealthCheck(0, 0))
	if r, err := lim.Allow(ctx, "k"); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	resetDone := make(chan error, 1)
	go func() { resetDone <- lim.Reset(ctx, "k") }()
	<-delHeld
	// Sent after Reset cleared the cache, decided before the DEL runs.
	r, err := lim.Allow(ctx, "k")
	if err != nil || r.Allowed {
		close(delRelease)
		t.Fatalf("before the DEL ran: %+v %v; want a denial", r, err)
	}
	close(delRelease)
	if err := <-resetDone; err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, lim.keys("k")[0]).Val(); n != 0 {
		t.Fatal("the key survived Reset")
	}
	r, err = lim.Allow(ctx, "k")
	if err != nil || !r.Allowed {
		t.Errorf("after Reset returned, Redis holding nothing for the key: %+v %v; the deny cache answered a denial made before the DEL", r, err)
	}
}

// ringOfTwo returns a Ring of two shards, "near" and "far", on the shared
// server; the one named proxied goes through a droppingProxy. Every
// pipeline on the far shard passes through farHook; its connections are
// made by farDial, when set.
func ringOfTwo(t *testing.T, proxied string, farHook redis.Hook,
	farDial func(ctx context.Context, network, addr string) (net.Conn, error)) (*redis.Ring, *droppingProxy) {
	t.Helper()
	direct := redistest.Options(t).Addr
	p := startDroppingProxy(t, direct)
	addrs := map[string]string{"near": direct, "far": direct + "?far"}
	addrs[proxied] = p.addr
	farAddr := addrs["far"]
	ring := redis.NewRing(&redis.RingOptions{
		Addrs: addrs,
		NewClient: func(opt *redis.Options) *redis.Client {
			far := opt.Addr == farAddr
			if far && proxied != "far" {
				opt.Addr = direct
				if farDial != nil {
					opt.Dialer = farDial
				}
			}
			c := redis.NewClient(opt)
			if far {
				c.AddHook(farHook)
			}
			return c
		},
	})
	t.Cleanup(func() { ring.Close() })
	ctx := context.Background()
	if err := ring.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
		return c.ScriptLoad(ctx, scriptSrc).Err()
	}); err != nil {
		t.Fatal(err)
	}
	return ring, p
}

// farHook records the pipelines sent to the far shard, and calls hold,
// when set, before each.
type farHook struct {
	pipelineOnly
	mu   sync.Mutex
	seen []string
	hold func(args string)
}

func (h *farHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		args := pipelineArgs(cmds)
		h.mu.Lock()
		h.seen = append(h.seen, args)
		hold := h.hold
		h.mu.Unlock()
		if hold != nil {
			hold(args)
		}
		return next(ctx, cmds)
	}
}

// holdSend makes the n-th pipeline to the far shard that holds key's call
// wait until release is closed, 10s at most. The function it returns
// reports whether that send was released in time.
func (h *farHook) holdSend(key string, n int, release <-chan struct{}) (releasedInTime func() bool) {
	var released atomic.Bool
	sends := 0
	h.mu.Lock()
	h.hold = func(args string) {
		if !strings.Contains(args, "{"+key+"}") {
			return
		}
		h.mu.Lock()
		sends++
		hold := sends == n
		h.mu.Unlock()
		if hold {
			select {
			case <-release:
				released.Store(true)
			case <-time.After(10 * time.Second):
			}
		}
	}
	h.mu.Unlock()
	return released.Load
}

// onFar reports whether a Peek of key goes to the far shard.
func (h *farHook) onFar(t *testing.T, lim *Limiter, key string) bool {
	t.Helper()
	h.mu.Lock()
	h.seen = h.seen[:0]
	h.mu.Unlock()
	if _, err := lim.Peek(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range h.seen {
		if strings.Contains(a, "{"+key+"}") {
			return true
		}
	}
	return false
}

// shardKeys returns keys of lim on the near shard and on the far one.
func shardKeys(t *testing.T, lim *Limiter, h *farHook, nearN, farN int) (near, far []string) {
	t.Helper()
	for i := 0; i < 500 && (len(near) < nearN || len(far) < farN); i++ {
		k := fmt.Sprintf("k%d", i)
		if h.onFar(t, lim, k) {
			if len(far) < farN {
				far = append(far, k)
			}
		} else if len(near) < nearN {
			near = append(near, k)
		}
	}
	if len(near) < nearN || len(far) < farN {
		t.Fatal("not enough keys found on each shard")
	}
	return near, far
}

// setFlushers sets how many flushers b runs at once. The scenes of the
// tests above are set with two, both busy, where newBatcher allows three.
// No stalled send makes room for another (see room): the pipelines the
// scenes hold in hooks would count as stalled, and the calls meant to queue
// behind them would go at once.
func setFlushers(b *batcher, n int) {
	b.mu.Lock()
	b.flushers, b.stalls = n, 0
	b.mu.Unlock()
}

// queueTogether starts one Allow per key once no flusher may start, waits
// until all are queued, then lets a flusher send them in one batch. Each
// caller's error comes on the returned channel, keyed.
func queueTogether(t *testing.T, lim *Limiter, before func(), keys ...string) map[string]chan error {
	t.Helper()
	b := lim.batch
	b.mu.Lock()
	flushers := b.flushers
	b.mu.Unlock()
	setFlushers(b, 0)
	waitBatcherIdle(t, b) // no flusher left from before to take them
	out := map[string]chan error{}
	for _, k := range keys {
		ch := make(chan error, 1)
		out[k] = ch
		allowAsync(lim, context.Background(), k, ch)
	}
	waitPending(t, b, len(keys), "every decision queued")
	if before != nil {
		before()
	}
	setFlushers(b, flushers)
	b.expire() // starts a flusher on what is pending
	return out
}

// In a batch of several script calls (a Ring, a cluster), an answer in
// hand does not wait for the resends of the others: here the far shard
// refuses its call (LOADING) and its resend is slow, while the near
// decision, counted, is answered at once.
func TestAnswerNotHeldByAnotherGroupsResend(t *testing.T) {
	h := &farHook{}
	ring, p := ringOfTwo(t, "far", h, nil)
	// (The timeout only ends the wait should the near answer be held: it is
	// shorter than holdSend's 10s, and long enough for a loaded machine.)
	lim := newOn(t, ring, FixedWindow, PerHour(10), WithTimeout(5*time.Second), WithHealthCheck(1<<30, 0),
		WithPrefix(fmt.Sprintf("held-answer-%d", time.Now().UnixNano())))
	if lim.batch.grouping != groupNone {
		t.Fatal("a Ring is not grouped call by call")
	}
	nears, fars := shardKeys(t, lim, h, 1, 1)
	near, far := nears[0], fars[0]

	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	h.holdSend(far, 2, release) // the resend, after a refusal
	done := queueTogether(t, lim, func() {
		p.mu.Lock()
		p.refuse = 1 // the far shard's first script call is refused: it never ran
		p.mu.Unlock()
	}, near, far)
	nearErr := <-done[near]
	releaseOnce.Do(func() { close(release) })
	<-done[far]
	waitBatcherIdle(t, lim.batch)
	v, _ := redistest.Client(t).Get(context.Background(), lim.keys(near)[0]).Result()
	if nearErr != nil && fwCount(v) == 1 {
		t.Errorf("the near decision ran and counted (Redis holds %q), its answer back at once, yet its caller was told %q after waiting for the far shard's resend (%d failure(s) counted against Redis's health)",
			v, nearErr, lim.health.failures.Load())
	}
}

// An answer that a resend round brings in does not wait for the rounds
// after it: here Redis lost the script (SCRIPT FLUSH), so the near
// decision is sent again as EVAL in the first round and counted, while the
// far shard refuses every send (LOADING) and its rounds go on for 8, 16 and
// 32ms more. The near caller has its answer before the far shard's second
// resend goes out.
func TestAnswerNotHeldByLaterResendRounds(t *testing.T) {
	h := &farHook{}
	ring, p := ringOfTwo(t, "far", h, nil)
	lim := newOn(t, ring, FixedWindow, PerHour(10), WithTimeout(30*time.Second), WithHealthCheck(1<<30, 0),
		WithPrefix(fmt.Sprintf("held-rounds-%d", time.Now().UnixNano())))
	nears, fars := shardKeys(t, lim, h, 1, 1)
	near, far := nears[0], fars[0]
	if err := redistest.Client(t).ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loadScript(t, redistest.Client(t)) }) // for the tests that count sends

	nearAnswered := make(chan struct{})
	heldUntilAnswered := h.holdSend(far, 3, nearAnswered) // the second resend round
	done := queueTogether(t, lim, func() {
		p.mu.Lock()
		p.refuse = maxSends // every send to the far shard is refused: none runs
		p.mu.Unlock()
	}, near, far)
	nearErr := <-done[near]
	close(nearAnswered)
	farErr := <-done[far]
	waitBatcherIdle(t, lim.batch)
	v, _ := redistest.Client(t).Get(context.Background(), lim.keys(near)[0]).Result()
	if nearErr != nil || fwCount(v) != 1 {
		t.Errorf("near decision: %v, Redis holds %q; want admitted and counted once", nearErr, v)
	}
	if !heldUntilAnswered() {
		t.Error("the near decision, answered by the first resend round, was held until the far shard's rounds ended")
	}
	if farErr == nil || !strings.Contains(farErr.Error(), "LOADING") {
		t.Errorf("far decision: %v; want the shard's LOADING refusal", farErr)
	}
}

// halfWriter is a dialer whose connections, once armed, fail the first
// write holding two script calls after writing the first one whole: a
// connection reset in the middle of a pipeline.
type halfWriter struct {
	armed atomic.Bool
	done  atomic.Bool
}

type halfConn struct {
	net.Conn
	w *halfWriter
}

func (w *halfWriter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &halfConn{Conn: c, w: w}, nil
}

func (c *halfConn) Write(b []byte) (int, error) {
	marker := []byte("$7\r\nevalsha\r\n")
	first := bytes.Index(bytes.ToLower(b), marker)
	if first < 0 || !c.w.armed.Load() {
		return c.Conn.Write(b)
	}
	second := bytes.Index(bytes.ToLower(b[first+len(marker):]), marker)
	if second < 0 || !c.w.done.CompareAndSwap(false, true) {
		return c.Conn.Write(b)
	}
	cut := bytes.LastIndex(b[:first+len(marker)+second], []byte("\r\n*")) + 2
	n, err := c.Conn.Write(b[:cut])
	if err == nil {
		err = &net.OpError{Op: "write", Net: "tcp", Addr: c.RemoteAddr(), Err: syscall.ECONNRESET}
	}
	c.Conn.Close()
	return n, err
}

// A write that fails after another script call of its pipeline went out
// whole is not resendable, in any round of resend: that call may have run.
// Whether a call went alone is judged of its own last send, so a group
// resent alone (here the near shard's, refused with LOADING) does not make
// the far shard's old write error look like that of a call sent alone.
func TestStaleWriteErrorNotResent(t *testing.T) {
	h := &farHook{}
	w := &halfWriter{}
	ring, p := ringOfTwo(t, "near", h, w.dial)
	lim := newOn(t, ring, FixedWindow, PerHour(10), WithTimeout(10*time.Second), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("stale-write-%d", time.Now().UnixNano())))
	nears, fars := shardKeys(t, lim, h, 1, 2)
	keys := append(nears, fars...)
	done := queueTogether(t, lim, func() {
		p.mu.Lock()
		p.refuse = 1 // the near shard's script call is refused: it never ran
		p.mu.Unlock()
		w.armed.Store(true)
	}, keys...)
	errs := map[string]error{}
	for _, k := range keys {
		errs[k] = <-done[k]
	}
	waitBatcherIdle(t, lim.batch)
	if !w.done.Load() {
		t.Fatal("the far pipeline's write was never cut")
	}
	admin := redistest.Client(t)
	for _, k := range fars {
		v, _ := admin.Get(context.Background(), lim.keys(k)[0]).Result()
		if fwCount(v) == 2 {
			t.Errorf("one Allow of %s (answered %v), whose pipeline's write failed after it went out whole: Redis holds %q, counted twice",
				k, errs[k], v)
		}
	}
}
