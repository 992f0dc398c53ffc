package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A decision that times out while go-redis cannot connect (it dials again
// until the send's context ends, then reports only that) says why: its
// error is context.DeadlineExceeded and wraps the refused dial.
func TestTimeoutWrapsDialError(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.RefusedAddr(t)}) // go-redis's default retries
	t.Cleanup(func() { rdb.Close() })
	l, err := New(rdb, GCRA, PerSecond(10), WithTimeout(100*time.Millisecond), WithHealthCheck(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The first decision may time out before the first dial has failed.
	for i := range 3 {
		_, err = l.Allow(context.Background(), "k")
		var op *net.OpError
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("decision %d: %v, want a timeout", i, err)
		}
		if i > 0 && !errors.As(err, &op) {
			t.Errorf("decision %d: %v, want it to wrap the refused dial", i, err)
		}
	}
}

// A decision that times out on a Redis that accepts and never answers
// says that it was the limiter's timeout: a caller (a worker around Wait,
// say) must not take it for its own context's deadline, which returns
// ctx.Err() itself (TestFailureAtOwnDeadlineIsTheContexts). It still
// wraps context.DeadlineExceeded.
func TestTimeoutSaysItIsTheLimiters(t *testing.T) {
	for _, ctxTimeout := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: redistest.StuckServer(t), ContextTimeoutEnabled: ctxTimeout})
		t.Cleanup(func() { rdb.Close() })
		l, err := New(rdb, GCRA, PerSecond(10), WithTimeout(50*time.Millisecond), WithHealthCheck(0, 0),
			WithFailureMode(FailClosed))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, allowErr := l.Allow(context.Background(), "k")
		waitErr := l.Wait(context.Background(), "k")
		for what, err := range map[string]error{"Allow": allowErr, "Wait": waitErr} {
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrTimeout) || !strings.Contains(fmt.Sprint(err), "limiter's timeout") {
				t.Errorf("ContextTimeoutEnabled %v, %s on a Redis that never answers: %v; want DeadlineExceeded and ErrTimeout, naming the limiter's timeout",
					ctxTimeout, what, err)
			}
		}
		// The caller's own deadline, before the limiter's timeout: ctx's
		// error, not ErrTimeout.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err = l.Allow(ctx, "k")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
			t.Errorf("ContextTimeoutEnabled %v, Allow past its own deadline: %v; want ctx's error, not ErrTimeout", ctxTimeout, err)
		}
	}
}

// A timed-out decision's error costs nothing to read: errors.Is, errors.As
// and Error (availability and the failure's classification ask them of
// every failed decision, and so may the caller) build nothing.
func TestTimeoutErrorAllocatesNothing(t *testing.T) {
	var l lastError
	l.note(errors.New("dial tcp: connection refused"))
	for _, err := range []error{errTimeout, l.last.Load()} {
		var op *net.OpError
		if n := testing.AllocsPerRun(100, func() {
			_ = errors.Is(err, context.DeadlineExceeded)
			_ = errors.As(err, &op)
			_ = err.Error()
		}); n != 0 {
			t.Errorf("%v: %.0f allocations to inspect it; want 0", err, n)
		}
	}
}

// Telling what a failed call says (resendable, availability, NOSCRIPT)
// allocates nothing, for a reply of Redis's, one a hook wrapped, a
// network error and the limiter's timeout alike: every failed decision
// asks.
func TestFailureClassificationAllocatesNothing(t *testing.T) {
	rdb := redistest.Client(t)
	reply := rdb.Do(context.Background(), "NO-SUCH-COMMAND").Err()
	if !isRedisReply(reply) {
		t.Fatalf("%v: not a reply of Redis's", reply)
	}
	for _, err := range []error{reply, fmt.Errorf("a hook: %w", reply), errTimeout,
		&net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}} {
		if n := testing.AllocsPerRun(100, func() {
			_ = resendable(err, true)
			_ = availability(err)
			_ = isNoScript(err)
		}); n != 0 {
			t.Errorf("%v: %.0f allocations to classify it; want 0", err, n)
		}
	}
}

// faultConn fails its reads as a connection closed on this side (mode 1:
// a failover client's close, or crypto/tls's bare report of one) or hangs
// them (mode 2: a path that stopped forwarding: what arrives is dropped,
// and a read ends at its deadline, as a net.Conn's does).
type faultConn struct {
	net.Conn
	mode *atomic.Int32
}

func (c *faultConn) Read(b []byte) (int, error) {
	switch c.mode.Load() {
	case 1:
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}
	case 2:
		for {
			if _, err := c.Conn.Read(b); err != nil {
				return 0, err
			}
		}
	}
	return c.Conn.Read(b)
}

// A timeout is the limiter's own verdict on Redis, whatever error it
// names as its cause: once the last failed send was a connection closed
// on this side (which alone says nothing about Redis), the timeouts that
// follow must still open the breaker.
func TestTimeoutNamingAClosedConnectionCounts(t *testing.T) {
	closed := &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}
	if availability(closed) {
		t.Fatalf("a connection closed on this side counts against Redis's health")
	}
	var s sendFailure
	s.note(closed)
	if err := s.timeout(); !availability(err) {
		t.Errorf("the timeout %q does not count against Redis's health; a bare timeout does", err)
	}

	opt := redistest.Options(t)
	var mode atomic.Int32
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &faultConn{c, &mode}, nil
	}
	opt.MaxRetries = -1
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	lim := newOn(t, rdb, GCRA, PerMinute(100), WithTimeout(50*time.Millisecond), WithHealthCheck(3, time.Minute),
		WithPrefix(fmt.Sprintf("closed-cause-%d", time.Now().UnixNano())))
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	mode.Store(1)
	_, first := lim.Allow(ctx, "k")
	mode.Store(2)
	var last error
	for range 10 {
		_, last = lim.Allow(ctx, "k")
	}
	if lim.Health() != Unhealthy {
		t.Errorf("after a closed connection (%v) and 10 timeouts (the last: %v), the limiter is %v; want unhealthy", first, last, lim.Health())
	}
}

// failScripts is a go-redis hook that fails every script call, alone or
// in a pipeline, while on is set.
type failScripts struct{ on atomic.Bool }

func (h *failScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && isScriptCall(cmd) {
			return errors.New("boom")
		}
		return next(ctx, cmd)
	}
}
func (h *failScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() {
			err := errors.New("boom")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// A lone caller's own call counts, as a flusher's batch does, in what a
// timeout names as its cause: its answer forgets the failures before it,
// and its failure is remembered. Lone callers sent their own calls and did
// neither, so once they did on default clients too (the common setup), a
// timeout named a batch's failure long since answered over.
func TestTimeoutCauseFollowsLoneCalls(t *testing.T) {
	for _, ctxTimeout := range []bool{false, true} {
		p := redistest.StartProxy(t, redistest.Options(t).Addr)
		c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: ctxTimeout})
		h := &failScripts{}
		c.AddHook(h)
		lim := newOn(t, c, GCRA, PerHour(1000), WithTimeout(time.Second), WithHealthCheck(0, 0),
			WithPrefix(fmt.Sprintf("cause-lone-%d", time.Now().UnixNano())))
		b := lim.batch
		loadScript(t, c)
		ctx := context.Background()
		silent := func(what string, boom bool) {
			t.Helper()
			p.Delay(10 * time.Second)
			_, err := lim.Allow(ctx, "k")
			p.Delay(0)
			if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "boom") != boom {
				t.Errorf("ContextTimeoutEnabled %v, a timeout %s: %v; want DeadlineExceeded, naming the failure: %v", ctxTimeout, what, err, boom)
			}
		}
		// A batch fails (the lone caller's call handed to a flusher).
		inline, bounded := b.inline, b.bounded
		b.inline, b.bounded = false, nil
		h.on.Store(true)
		if _, err := lim.Allow(ctx, "k"); err == nil || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("ContextTimeoutEnabled %v, a failing batch: %v", ctxTimeout, err)
		}
		h.on.Store(false)
		b.inline, b.bounded = inline, bounded
		for i := 0; i < 3; i++ {
			if _, err := lim.Allow(ctx, "k"); err != nil {
				t.Fatalf("ContextTimeoutEnabled %v: %v", ctxTimeout, err)
			}
		}
		silent("after three answered lone calls", false)
		h.on.Store(true)
		if _, err := lim.Allow(ctx, "k"); err == nil || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("ContextTimeoutEnabled %v, a failing lone call: %v", ctxTimeout, err)
		}
		h.on.Store(false)
		silent("right after a lone call failed", true)
		c.Close()
	}
}

// readTimesOutAtDeadline is a hook that fails every command with a read
// timeout once its context ends: what go-redis's own read does on a client
// with ContextTimeoutEnabled whose server never answers.
type readTimesOutAtDeadline struct{}

func (readTimesOutAtDeadline) DialHook(next redis.DialHook) redis.DialHook { return next }

func (readTimesOutAtDeadline) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		<-ctx.Done()
		err := &net.OpError{Op: "read", Net: "tcp", Err: ioTimeout{}}
		cmd.SetErr(err)
		return err
	}
}

func (readTimesOutAtDeadline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		<-ctx.Done()
		err := &net.OpError{Op: "read", Net: "tcp", Err: ioTimeout{}}
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}
}

type ioTimeout struct{}

func (ioTimeout) Error() string   { return "i/o timeout" }
func (ioTimeout) Timeout() bool   { return true }
func (ioTimeout) Temporary() bool { return true }

// A batch whose read times out at its calls' deadline, the limiter's
// timeout, answers its calls with that error when it comes before the
// watchdog: each still says it was the limiter's timeout (ErrTimeout), as
// the watchdog's and a lone caller's do.
func TestReadTimeoutAtTheLimitersDeadlineIsErrTimeout(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.StuckServer(t), ContextTimeoutEnabled: true})
	rdb.AddHook(readTimesOutAtDeadline{})
	t.Cleanup(func() { rdb.Close() })
	l := newOn(t, rdb, GCRA, PerSecond(10), WithTimeout(30*time.Millisecond), WithHealthCheck(0, 0))
	defer l.Close()
	var mu sync.Mutex
	bad := map[string]int{}
	for range 20 {
		var wg sync.WaitGroup
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := l.Allow(context.Background(), "k"); !errors.Is(err, ErrTimeout) {
					mu.Lock()
					bad[fmt.Sprint(err)]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	if len(bad) > 0 {
		t.Errorf("of 200 decisions timed out at the limiter's deadline, not ErrTimeout: %v", bad)
	}
}
