package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// With a client that enforces context deadlines, a lone caller sends its
// own call; concurrent callers still share pipelines, each with its own
// answer, and a hung Redis still costs a caller no more than its timeout.
func TestInlineSend(t *testing.T) {
	opt := redistest.Options(t)
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	defer c.Close()
	lim := newOn(t, c, TokenBucket, PerHour(200), WithPrefix(fmt.Sprintf("inline-%d", time.Now().UnixNano())))
	if !lim.batch.inline {
		t.Fatal("ContextTimeoutEnabled not detected")
	}
	ctx := context.Background()
	if r, err := lim.Allow(ctx, "lone"); err != nil || r.Remaining != 199 {
		t.Fatalf("%+v %v", r, err)
	}
	// A lone call after the scripts are gone falls back to EVAL.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := lim.Allow(ctx, "lone"); err != nil || r.Remaining != 198 {
		t.Fatalf("after SCRIPT FLUSH: %+v %v", r, err)
	}
	var wg sync.WaitGroup
	for i := 1; i <= 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			key := fmt.Sprintf("caller-%d", i)
			if r, err := lim.AllowN(ctx, key, i); err != nil || r.Remaining != 200-i {
				t.Errorf("%s cost %d: %+v %v", key, i, r, err)
			}
		}(i)
	}
	wg.Wait()

	stuck := redis.NewClient(&redis.Options{Addr: redistest.StuckServer(t), ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: time.Minute})
	defer stuck.Close()
	hung := newOn(t, stuck, GCRA, PerSecond(1), WithTimeout(50*time.Millisecond), WithFailureMode(FailClosed))
	if r, err := hung.Allow(ctx, "k"); err == nil || r.Allowed {
		t.Errorf("hung Redis: %+v %v; want a timely denial with the error", r, err)
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

// wrapErrors is a go-redis hook that wraps every error it sees, as
// instrumentation hooks do: go-redis stores a command's error as its
// hooks return it.
type wrapErrors struct{}

func (wrapErrors) DialHook(next redis.DialHook) redis.DialHook { return next }
func (wrapErrors) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); err != nil {
			return fmt.Errorf("redis %s: %w", cmd.Name(), err)
		}
		return nil
	}
}
func (wrapErrors) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := next(ctx, cmds); err != nil {
			return fmt.Errorf("redis pipeline: %w", err)
		}
		return nil
	}
}

// A hook of the client's that wraps errors does not hide Redis's NOSCRIPT
// from the limiter: after a SCRIPT FLUSH, the decision is sent again with
// the script's source, on both paths.
func TestNoScriptThroughAWrappingHook(t *testing.T) {
	for _, ctxTimeout := range []bool{false, true} {
		opt := redistest.Options(t)
		opt.ContextTimeoutEnabled = ctxTimeout
		c := redis.NewClient(opt)
		defer c.Close()
		c.AddHook(wrapErrors{})
		lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(5*time.Second), WithHealthCheck(0, 0),
			WithPrefix(fmt.Sprintf("wrapped-%d", time.Now().UnixNano())))
		if lim.batch.inline != ctxTimeout {
			t.Fatalf("ContextTimeoutEnabled %v: inline %v", ctxTimeout, lim.batch.inline)
		}
		ctx := context.Background()
		for i := 0; i < 3; i++ {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if r, err := lim.Allow(ctx, "k"); err != nil || r.Remaining != 9-i {
				t.Errorf("ContextTimeoutEnabled %v, Allow %d after SCRIPT FLUSH: %+v, %v; want it decided", ctxTimeout, i+1, r, err)
			}
		}
	}
}

// A lone caller on a default client (no ContextTimeoutEnabled) sends its
// own call too, through a copy of the client whose read and write timeouts
// are the limiter's: no handoff to a flusher and back. Its deadline still
// holds whatever the client's own timeouts are, and a caller whose context
// ends before the limiter's timeout is still answered at its context's
// deadline.
func TestLoneCallerOnDefaultClientSendsInline(t *testing.T) {
	c := redis.NewClient(redistest.Options(t))
	defer c.Close()
	count := &countScripts{}
	c.AddHook(count)
	lim := newOn(t, c, GCRA, PerHour(100), WithPrefix(fmt.Sprintf("lone-default-%d", time.Now().UnixNano())))
	loadScript(t, c)
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		if r, err := lim.Allow(ctx, "k"); err != nil || r.Remaining != 100-i {
			t.Fatalf("decision %d: %+v %v", i, r, err)
		}
	}
	if n := count.n.Load(); n != 3 {
		t.Errorf("3 lone decisions sent %d script calls as single commands; want 3 (sent by their callers, through the client's hooks)", n)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := lim.Allow(ctx, "k"); err != nil || r.Remaining != 96 {
		t.Fatalf("after SCRIPT FLUSH: %+v %v", r, err)
	}

	stuck := redis.NewClient(&redis.Options{Addr: redistest.StuckServer(t), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer stuck.Close()
	hung := newOn(t, stuck, GCRA, PerSecond(1), WithTimeout(50*time.Millisecond), WithFailureMode(FailClosed))
	start := time.Now()
	if r, err := hung.Allow(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) || r.Allowed {
		t.Errorf("hung Redis, 50ms timeout, client read timeout a minute: %+v %v; want a denial with DeadlineExceeded", r, err)
	}
	long := newOn(t, stuck, GCRA, PerSecond(1), WithTimeout(time.Minute), WithFailureMode(FailClosed))
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if r, err := long.Allow(short, "k"); !errors.Is(err, context.DeadlineExceeded) || r.Allowed {
		t.Errorf("hung Redis, a minute's timeout, the caller's context 50ms: %+v %v; want a denial with the context's error", r, err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("two decisions bounded by 50ms took %v against a hung Redis", d)
	}
}
