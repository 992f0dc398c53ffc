package core

// Deadlines: a decision whose caller has stopped waiting is not sent late,
// and a caller's own deadline says nothing about Redis's health. Each test
// names the defect it guards against.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

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

// A lone caller sends its call itself, "the deadline holds just the
// same". It did not while go-redis waits for a pooled connection:
// execContext had no Done channel, so the pool waited its PoolTimeout, not
// the decision's timeout. On both kinds of client: one that enforces
// context deadlines, and a default one (whose copy bounds the call).
func TestInlineSendHonoursTimeoutWaitingForAConnection(t *testing.T) {
	for _, ctxTimeout := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeout), func(t *testing.T) {
			opt := redistest.Options(t)
			opt.PoolSize, opt.PoolTimeout, opt.MaxRetries = 1, time.Hour, -1
			opt.ContextTimeoutEnabled = ctxTimeout
			opt.ClientName = fmt.Sprintf("edge-inline-pool-%v", ctxTimeout)
			c := redis.NewClient(opt)
			t.Cleanup(func() { c.Close() }) // after the hold is released
			lim := newOn(t, c, GCRA, PerSecond(10), WithTimeout(50*time.Millisecond),
				WithHealthCheck(0, 0), WithPrefix(fmt.Sprintf("inline-pool-%d", time.Now().UnixNano())))
			if lim.batch.inline != ctxTimeout {
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
		})
	}
}

// The inline path does not see the caller's cancellation (sendInline hands
// go-redis a context that carries only the deadline): a caller whose
// deadline is far (here an hour) must not take it, and returns as soon as
// it is canceled.
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

// A caller that can be canceled, with a deadline within inlineLag (an HTTP
// request with the default timeout), sends its own decision, on a client
// that enforces deadlines and on a default one alike; canceled while Redis
// does not answer, it returns context.Canceled by its deadline. Answered,
// it gets its answer.
func TestInlineSendForCancelableCaller(t *testing.T) {
	for _, ctxTimeout := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeout), func(t *testing.T) {
			count := &countScripts{}
			opt := redistest.Options(t)
			opt.ContextTimeoutEnabled = ctxTimeout
			c := redis.NewClient(opt)
			defer c.Close()
			c.AddHook(count)
			lim := newOn(t, c, GCRA, PerHour(100), WithTimeout(DefaultTimeout), WithPrefix(fmt.Sprintf("inline-cancelable-%d", time.Now().UnixNano())))
			loadScript(t, c)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if r, err := lim.Allow(ctx, "k"); err != nil || r.Remaining != 99 {
				t.Fatalf("%+v %v", r, err)
			}
			if n := count.n.Load(); n != 1 {
				t.Errorf("%d script calls sent inline; want the decision's 1", n)
			}

			stuck := redis.NewClient(&redis.Options{Addr: redistest.StuckServer(t), ContextTimeoutEnabled: ctxTimeout,
				MaxRetries: -1, ReadTimeout: time.Hour, WriteTimeout: time.Hour})
			defer stuck.Close()
			hung := newOn(t, stuck, GCRA, PerSecond(1), WithTimeout(inlineLag), WithHealthCheck(0, 0))
			ctx, cancel = context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := hung.Allow(ctx, "k")
				done <- err
			}()
			waitFor(t, "the inline send", func() bool {
				active, pending, _, _ := batcherState(hung.batch)
				return active > 0 && pending == 0
			})
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("got %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second): // ten times its deadline
				t.Error("a canceled caller was still waiting 10s later")
				stuck.Close()
				<-done
			}
		})
	}
}

// A send that fails at the caller's own deadline (go-redis's read deadline
// is that instant, on the inline path and in a flusher alike) reports it as
// the caller's context does, context.DeadlineExceeded, even when the
// failed read wakes before the context's own timer: otherwise decide takes
// it for Redis's failure (the middleware then serves a request past its
// deadline on FailOpen), and WaitN on FailLocal goes on with the local
// view, which counted nothing.
func TestFailureAtOwnDeadlineIsTheContexts(t *testing.T) {
	for _, inline := range []bool{false, true} {
		stuck := redis.NewClient(&redis.Options{Addr: redistest.StuckServer(t), ContextTimeoutEnabled: inline,
			MaxRetries: -1, ReadTimeout: time.Hour, WriteTimeout: time.Hour})
		defer stuck.Close()
		lim := newOn(t, stuck, GCRA, PerSecond(1000), WithTimeout(5*time.Second), WithHealthCheck(0, 0),
			WithFailureMode(FailLocal))
		allow, wait := 0, 0
		var lastAllow, lastWait error
		for i := 0; i < 20; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			if _, err := lim.Allow(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
				allow, lastAllow = allow+1, err
			}
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
			if err := lim.Wait(ctx, "k"); err == nil || err.Error() != context.DeadlineExceeded.Error() {
				wait, lastWait = wait+1, err
			}
			cancel()
		}
		if allow > 0 || wait > 0 {
			t.Errorf("ContextTimeoutEnabled %v: at their own deadline %d/20 Allows (%v) and %d/20 Waits (%v) did not return the context's error",
				inline, allow, lastAllow, wait, lastWait)
		}
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

func TestTimeoutBoundsADecision(t *testing.T) {
	// A server that accepts connections and never answers: the decision
	// must come back with a timeout error, decided by the failure mode.
	stuck := redistest.StuckServer(t)
	c := redis.NewClient(&redis.Options{Addr: stuck, MaxRetries: -1, ReadTimeout: time.Minute})
	defer c.Close()
	lim := newOn(t, c, GCRA, PerSecond(1), WithTimeout(50*time.Millisecond), WithFailureMode(FailClosed))
	r, err := lim.Allow(context.Background(), "k")
	if !errors.Is(err, context.DeadlineExceeded) || r.Allowed {
		t.Errorf("got %+v, %v; want a denial with DeadlineExceeded", r, err)
	}
}

// loadingHook answers every script call with LOADING, as a restarting
// Redis does: resent after a pause, within the limiter's timeout.
type loadingHook struct{}

func (loadingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (loadingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScriptCall(cmd) {
			cmd.SetErr(scriptError("LOADING Redis is loading the dataset in memory"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}
func (loadingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if isScriptCall(cmd) {
				cmd.SetErr(scriptError("LOADING Redis is loading the dataset in memory"))
			}
		}
		return nil
	}
}

// A decision cut short by the caller's own deadline returns ctx.Err()
// itself, and ctx.Err() is set when it does, on a fail-open limiter too,
// not admitted: a resend's pause can end at that deadline a moment before
// the context's own timer, and the decision used to return the Redis
// error then (the middleware answered 503 "unavailable" for a request
// that was merely late, 13 times in 200).
func TestDecisionCutShortReturnsTheContextsErrorWhenItIsSet(t *testing.T) {
	c := redistest.Client(t)
	c.AddHook(loadingHook{})
	lim := newOn(t, c, GCRA, PerSecond(1000), WithTimeout(time.Second), WithHealthCheck(0, 0))
	for i := 0; i < 100; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 12*time.Millisecond)
		res, err := lim.Allow(ctx, "k")
		ended := ctx.Err()
		cancel()
		if err != context.DeadlineExceeded || ended == nil || res.Allowed {
			t.Fatalf("call %d: %+v, %v (ctx.Err() %v at the return); want not admitted, the context's own error, set", i, res, err, ended)
		}
	}
}

// detachedCtx reports a deadline but can never be canceled (Done nil), as
// a context that detaches a request's work from its cancellation may.
type detachedCtx struct {
	context.Context
	deadline time.Time
}

func (c detachedCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (detachedCtx) Done() <-chan struct{}         { return nil }
func (detachedCtx) Err() error                    { return nil }

// A context whose deadline has passed but which can never say so (Done
// nil) ends a decision at once, not admitted, with DeadlineExceeded: a
// decision waiting for it to say so would wait for good.
func TestDecisionOnAContextThatCannotEnd(t *testing.T) {
	lim := newOn(t, redistest.Client(t), GCRA, PerSecond(1000))
	detached := detachedCtx{context.Background(), time.Now().Add(-time.Millisecond)}
	canceled, cancel := context.WithCancel(detached) // (its Done closes only at cancel)
	defer cancel()
	timed, cancelTimed := context.WithTimeout(detached, 10*time.Second) // (the earlier deadline: no timer)
	defer cancelTimed()
	for name, ctx := range map[string]context.Context{"detached": detached, "WithCancel of it": canceled, "WithTimeout of it": timed} {
		errs := make(chan string, 3)
		go func() {
			defer close(errs)
			if res, err := lim.Allow(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) || res.Allowed {
				errs <- fmt.Sprintf("Allow: %+v, %v; want not admitted, DeadlineExceeded", res, err)
			}
			if _, err := lim.Peek(ctx, "k"); err == nil {
				errs <- "Peek: no error past the deadline"
			}
			if err := lim.Wait(ctx, "k"); err == nil {
				errs <- "Wait: no error past the deadline"
			}
		}()
		timeout := time.After(5 * time.Second)
	wait:
		for {
			select {
			case msg, ok := <-errs:
				if !ok {
					break wait
				}
				t.Errorf("%s: %s", name, msg)
			case <-timeout:
				t.Fatalf("%s: a decision on a context that cannot end is still waiting after 5s", name)
			}
		}
	}
}
