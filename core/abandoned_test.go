package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A caller that gave up before its batch was sent is not sent at all.
func TestAbandonedCallsAreNotSent(t *testing.T) {
	c := redistest.Client(t)
	lim := newOn(t, c, GCRA, PerMinute(1))
	b := newBatcher(c, lim.batch.script, 1, lim.batch.ruleArgs)
	b.flushers = 0 // nothing flushes until we say so
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	key := fmt.Sprintf("abandoned-%d", time.Now().UnixNano())
	c1 := getCall(callScript)
	c1.keys, c1.args = []keyArg{{b: []byte(key)}}, appendArgs(nil, true, 1)
	answered, err := b.do(ctx, 0, c1)
	if answered || err != context.Canceled {
		t.Fatalf("got %v", err)
	}
	b.flushers = 1
	done := make(chan struct{})
	go func() {
		c2 := getCall(callDel)
		c2.keys = []keyArg{{b: []byte(key + "-other")}}
		b.do(context.Background(), 0, c2)
		close(done)
	}()
	<-done
	if n := c.Exists(context.Background(), key).Val(); n != 0 {
		t.Error("an abandoned call was executed")
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
	hook := &holdFirstPipeline{loading: true, held: make(chan struct{}), release: make(chan struct{})}
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
	case <-hook.held:
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
