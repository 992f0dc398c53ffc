package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// ctxTimeoutClient returns a client of the test Redis with
// ContextTimeoutEnabled: one that ends a command at its context's
// deadline, on which a lone caller sends its own call (inline).
func ctxTimeoutClient(tb testing.TB) *redis.Client {
	opt := redistest.Options(tb)
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	tb.Cleanup(func() { c.Close() })
	return c
}

// inlineLimiter returns a limiter of alg and limit, with keys under a
// prefix of its own made from name, on a ctxTimeoutClient, which it
// returns too; it fails t unless a lone caller sends its own call.
func inlineLimiter(t *testing.T, alg Algorithm, limit Limit, name string) (*Limiter, *redis.Client) {
	t.Helper()
	c := ctxTimeoutClient(t)
	lim := newOn(t, c, alg, limit, WithPrefix(fmt.Sprintf("%s-%d", name, time.Now().UnixNano())))
	if !lim.batch.inline {
		t.Fatal("ContextTimeoutEnabled not detected: lone calls are not sent inline")
	}
	return lim, c
}

// With a client that enforces context deadlines, a lone caller sends its
// own call; concurrent callers still share pipelines, each with its own
// answer, and a hung Redis still costs a caller no more than its timeout.
func TestInlineSend(t *testing.T) {
	lim, c := inlineLimiter(t, TokenBucket, PerHour(200), "inline")
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
type countScripts struct {
	commandsOnly
	n atomic.Int32
}

func (h *countScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScriptCall(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
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
// wrapErrors is a hook of the client's that wraps every error of a
// command (fmt.Errorf's %w), or, with rebuild, replaces a script call's
// by a new error of the same text (a hook that redacts or retypes errors,
// say; go-redis's own handshake needs its errors as they are).
type wrapErrors struct{ rebuild bool }

func (h wrapErrors) redo(prefix string, err error) error {
	if h.rebuild {
		return errors.New(err.Error())
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

func (h wrapErrors) redoCmd(cmd redis.Cmder, err error) error {
	if h.rebuild && cmd.Name() != "evalsha" && cmd.Name() != "eval" {
		return err
	}
	return h.redo("redis "+cmd.Name(), err)
}

func (wrapErrors) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h wrapErrors) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); err != nil {
			err = h.redoCmd(cmd, err)
			cmd.SetErr(err)
			return err
		}
		return nil
	}
}
func (h wrapErrors) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := next(ctx, cmds); err != nil {
			for _, cmd := range cmds {
				if e := cmd.Err(); e != nil {
					cmd.SetErr(h.redoCmd(cmd, e))
				}
			}
			return fmt.Errorf("redis pipeline: %w", err)
		}
		return nil
	}
}

// A hook of the client's that wraps errors, or rebuilds them with the
// same text, does not hide Redis's NOSCRIPT from the limiter: after a
// SCRIPT FLUSH, the decision is sent again with the script's source, on
// both paths, and Redis is not taken for unhealthy.
func TestNoScriptThroughAWrappingHook(t *testing.T) {
	for _, rebuild := range []bool{false, true} {
		for _, ctxTimeout := range []bool{false, true} {
			opt := redistest.Options(t)
			opt.ContextTimeoutEnabled = ctxTimeout
			c := redis.NewClient(opt)
			defer c.Close()
			c.AddHook(wrapErrors{rebuild: rebuild})
			lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(5*time.Second),
				WithPrefix(fmt.Sprintf("wrapped-%d", time.Now().UnixNano())))
			if lim.batch.inline != ctxTimeout {
				t.Fatalf("ContextTimeoutEnabled %v: inline %v", ctxTimeout, lim.batch.inline)
			}
			ctx := context.Background()
			for i := 0; i < 4; i++ {
				if err := c.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				if r, err := lim.Allow(ctx, "k"); err != nil || r.Remaining != 9-i {
					t.Errorf("errors rebuilt %v, ContextTimeoutEnabled %v, Allow %d after SCRIPT FLUSH: %+v, %v; want it decided",
						rebuild, ctxTimeout, i+1, r, err)
				}
			}
			if h := lim.Health(); h != Healthy {
				t.Errorf("errors rebuilt %v, ContextTimeoutEnabled %v: Health() %v after NOSCRIPTs; want healthy", rebuild, ctxTimeout, h)
			}
		}
	}
}

// A lone caller on a default client (no ContextTimeoutEnabled) sends its
// own call too, through a copy of the client that enforces context
// deadlines: no handoff to a flusher and back. Its deadline still
// holds whatever the client's own timeouts are, and a caller whose context
// ends before the limiter's timeout is still answered at its context's
// deadline.
func TestLoneCallerOnDefaultClientSendsInline(t *testing.T) {
	count := &countScripts{}
	c, lim := newHooked(t, count, "lone-default")
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

	// Every read and write of the call ends at its deadline, not each a
	// timeout after it starts: here a new connection's handshake takes one
	// slow reply (400ms) of the 500ms timeout, and the script's reply would
	// come 400ms after that.
	p := redistest.StartProxy(t, redistest.Options(t).Addr)
	slow := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute, MaxRetries: -1})
	defer slow.Close()
	late := newOn(t, slow, GCRA, PerHour(100), WithTimeout(500*time.Millisecond), WithFailureMode(FailClosed), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("lone-default-slow-%d", time.Now().UnixNano())))
	loadScript(t, c)
	p.Delay(400 * time.Millisecond)
	if r, err := late.Allow(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) || r.Allowed {
		t.Errorf("replies 400ms late, a 500ms timeout, a new connection: %+v %v; want a denial with DeadlineExceeded (the handshake and the call share the timeout)", r, err)
	}
}

// A lone caller on a default client hands its call to a flusher when the
// copy could not end it at its deadline: a client that never sets
// deadlines on its connections (read or write timeout -2) would keep, on
// a connection the copy used, the copy's last deadline; a
// CredentialsProvider, which takes no context, runs while a connection is
// made.
func TestLoneCallerHandsOffWhenTheCopyCannotEndTheCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*redis.Options)
	}{
		{"read timeout -2", func(o *redis.Options) { o.ReadTimeout = -2 }},
		{"write timeout -2", func(o *redis.Options) { o.WriteTimeout = -2 }},
		{"CredentialsProvider", func(o *redis.Options) {
			user, pass := o.Username, o.Password
			o.CredentialsProvider = func() (string, string) { return user, pass }
		}},
	} {
		opt := redistest.Options(t)
		tc.set(opt)
		c := redis.NewClient(opt)
		lim := newOn(t, c, GCRA, PerHour(100), WithPrefix(fmt.Sprintf("lone-handoff-%d", time.Now().UnixNano())))
		if lim.batch.bounded != nil {
			t.Errorf("%s: a lone caller sends on a copy of the client", tc.name)
		}
		if r, err := lim.Allow(context.Background(), "k"); err != nil || r.Remaining != 99 {
			t.Errorf("%s: %+v %v", tc.name, r, err)
		}
		c.Close()
	}
}

// The copy keeps the client's own read and write timeouts: a write timeout
// shorter than a reply takes does not become its read timeout.
func TestLoneCallerKeepsTheClientsReadTimeout(t *testing.T) {
	p := redistest.StartProxy(t, redistest.Options(t).Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, WriteTimeout: 100 * time.Millisecond, ReadTimeout: 10 * time.Second})
	defer c.Close()
	lim := newOn(t, c, GCRA, PerHour(100), WithTimeout(5*time.Second), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("lone-readtimeout-%d", time.Now().UnixNano())))
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	p.Delay(300 * time.Millisecond)
	for i := 0; i < 2; i++ {
		if _, err := lim.Allow(ctx, "k"); err != nil {
			t.Errorf("decision %d, replies 300ms late, a 10s read timeout, a 100ms write timeout and a 5s timeout: %v", i, err)
		}
	}
}

// retainCmds is a go-redis hook that keeps the commands it saw, to read
// them later, as an asynchronous exporter does.
type retainCmds struct {
	commandsOnly
	mu   sync.Mutex
	cmds []redis.Cmder
}

func (h *retainCmds) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.mu.Lock()
		h.cmds = append(h.cmds, cmd)
		h.mu.Unlock()
		return err
	}
}

// A hook may keep the command a lone caller sent: reading it later does
// not panic and gives its own call's answer. (Its arguments are reused
// once the call returns: see failure-modes.md.)
func TestHookKeepsALoneCallersCommand(t *testing.T) {
	h := &retainCmds{}
	_, lim := newHooked(t, h, "lone-retain")
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := lim.Allow(ctx, fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := h.cmds[len(h.cmds)-3:] // after loadScript's
	for i, cmd := range kept {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("command %d (%T), read after its call: %v", i, cmd, r)
				}
			}()
			_ = cmd.Name()
			_ = cmd.Args()
			if cmd.Err() != nil {
				t.Errorf("command %d, read after its call: %v", i, cmd.Err())
			}
			if v, ok := cmd.(interface{ Val() []int64 }); !ok || len(v.Val()) == 0 {
				t.Errorf("command %d, read after its call: no answer", i)
			}
		}()
	}
}

// newHooked returns a default client with hook added, and a GCRA limiter
// of 100 per hour on it under prefix, the scripts loaded.
func newHooked(t *testing.T, hook redis.Hook, prefix string) (*redis.Client, *Limiter) {
	c := redis.NewClient(redistest.Options(t))
	t.Cleanup(func() { c.Close() })
	c.AddHook(hook)
	lim := newOn(t, c, GCRA, PerHour(100), WithPrefix(fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())))
	loadScript(t, c)
	return c, lim
}

// A client that never sets deadlines on its connections (a ReadTimeout and
// WriteTimeout of -2) does not end a command at its context's deadline,
// ContextTimeoutEnabled or not: a lone caller on it, and a Reset, go
// through a flusher, whose watchdog ends the wait at the timeout. Sent
// from the caller's goroutine, a decision waited as long as Redis hung.
func TestLoneCallerOnClientWithoutDeadlines(t *testing.T) {
	for _, ctxTimeout := range []bool{true, false} {
		stuck := redis.NewClient(&redis.Options{Addr: redistest.StuckServer(t), ContextTimeoutEnabled: ctxTimeout,
			ReadTimeout: -2, WriteTimeout: -2})
		defer stuck.Close()
		lim := newOn(t, stuck, GCRA, PerSecond(1), WithTimeout(50*time.Millisecond), WithFailureMode(FailClosed), WithHealthCheck(0, 0))
		defer lim.Close()
		var r Result
		var err, resetErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			r, err = lim.Allow(context.Background(), "k")
			resetErr = lim.Reset(context.Background(), "k")
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("ContextTimeoutEnabled %v: a decision and a Reset bounded by 50ms still wait, 30s on, for a Redis that never answers", ctxTimeout)
		}
		if !errors.Is(err, context.DeadlineExceeded) || r.Allowed {
			t.Errorf("ContextTimeoutEnabled %v: %+v %v; want a denial with DeadlineExceeded", ctxTimeout, r, err)
		}
		if !errors.Is(resetErr, context.DeadlineExceeded) {
			t.Errorf("ContextTimeoutEnabled %v: Reset: %v; want DeadlineExceeded", ctxTimeout, resetErr)
		}
	}
}

// Which clients end a command at its context's deadline themselves: a
// timeout of -2 sets no deadline on a connection; -1 (stored as 0 by a
// Client and a ClusterClient, as given by a Ring, whose shards store it as
// 0) leaves the context's.
func TestEnforcesDeadlinesByTimeouts(t *testing.T) {
	at := "127.0.0.1:1"
	for _, c := range []struct {
		name   string
		client redis.UniversalClient
		want   bool
	}{
		{"Client", redis.NewClient(&redis.Options{Addr: at, ContextTimeoutEnabled: true}), true},
		{"Client, no ContextTimeoutEnabled", redis.NewClient(&redis.Options{Addr: at}), false},
		{"Client -1", redis.NewClient(&redis.Options{Addr: at, ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1}), true},
		{"Client -2", redis.NewClient(&redis.Options{Addr: at, ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"Client write -2", redis.NewClient(&redis.Options{Addr: at, ContextTimeoutEnabled: true, WriteTimeout: -2}), false},
		{"Cluster -1", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{at}, ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1}), true},
		{"Cluster -2", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{at}, ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"Ring -1", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": at}, ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1}), true},
		{"Ring -2", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": at}, ContextTimeoutEnabled: true, ReadTimeout: -2, WriteTimeout: -2}), false},
		{"Ring write -2", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": at}, ContextTimeoutEnabled: true, WriteTimeout: -2}), false},
	} {
		if got := enforcesDeadlines(c.client); got != c.want {
			t.Errorf("%s: enforcesDeadlines = %v; want %v", c.name, got, c.want)
		}
		c.client.Close()
	}
}
