package core

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestFailureModes(t *testing.T) {
	ctx := context.Background()
	c := redistest.RefusedClient(t)
	cases := []struct {
		mode    FailureMode
		allowed []bool // three calls on one key, limit 2
	}{
		{FailOpen, []bool{true, true, true}},
		{FailClosed, []bool{false, false, false}},
		{FailLocal, []bool{true, true, false}},
	}
	for _, tc := range cases {
		t.Run(tc.mode.String(), func(t *testing.T) {
			lim := newOn(t, c, TokenBucket, PerMinute(2), WithFailureMode(tc.mode), WithHealthCheck(0, 0))
			for i, want := range tc.allowed {
				r, err := lim.Allow(ctx, "k")
				if err == nil || r.Allowed != want {
					t.Errorf("call %d: allowed=%v err=%v; want allowed=%v and the error", i, r.Allowed, err, want)
				}
			}
			if tc.mode == FailLocal {
				if r, err := lim.Peek(ctx, "k"); err == nil || r.Remaining != 0 || len(r.Rules) != 1 {
					t.Errorf("peek on the twin: %+v %v", r, err)
				}
			}
		})
	}
	if _, err := New(c, GCRA, PerSecond(1), WithFailureMode(FailureMode(7))); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("unknown failure mode: %v", err)
	}
}

func TestWaitWithFailLocal(t *testing.T) {
	lim := newOn(t, redistest.RefusedClient(t), TokenBucket, Limit{Rate: 1, Period: 20 * time.Millisecond}, WithFailureMode(FailLocal))
	for i := 0; i < 3; i++ {
		if err := lim.Wait(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	open := newOn(t, redistest.RefusedClient(t), TokenBucket, PerSecond(1))
	if err := open.Wait(context.Background(), "k"); err == nil {
		t.Error("Wait on a dead Redis without FailLocal returned nil")
	}
}

// With FailLocal, the in-process twin decides while Redis is down and keeps
// what it admitted once Redis is back, until it expires: Redis failing
// again must not hand the budget out afresh (see faillocal_test.go). A
// caller whose context has ended before it asks takes nothing from it, and
// is not admitted, healthy or not (see TestFailLocalCallerGoneBeforeItAsks).
func TestFailLocalTwinAcrossAnOutage(t *testing.T) {
	srv := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	changed := make(chan Health, 10)
	lim := newOn(t, c, TokenBucket, PerMinute(5), WithFailureMode(FailLocal), WithHealthCheck(2, 100*time.Millisecond),
		WithHealthHook(func(h Health, _ error) { changed <- h }))
	twinKeys := func() int {
		lim.local.mu.Lock()
		defer lim.local.mu.Unlock()
		return len(lim.local.keys)
	}
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if r, err := lim.Allow(canceled, "gone"); err == nil || r.Allowed || twinKeys() != 0 {
		t.Errorf("a canceled caller: %+v, %v, %d key(s) in the twin; want its error, not admitted, and nothing taken", r, err, twinKeys())
	}
	srv.Stop()
	for i := 0; i < 2; i++ {
		lim.Allow(ctx, "k")
	}
	if h := <-changed; h != Unhealthy {
		t.Fatalf("after 2 failures: %v", h)
	}
	for i := 0; i < 100; i++ {
		if r, err := lim.Allow(ctx, fmt.Sprint("client-", i)); err == nil || !r.Allowed {
			t.Fatalf("twin decision %d: %+v, %v", i, r, err)
		}
	}
	if n := twinKeys(); n < 100 {
		t.Fatalf("%d keys in the twin during the outage; want 100 or more", n)
	}
	restartUntilHealthy(t, srv, changed)
	if r, err := lim.Allow(ctx, "client-0"); err != nil || r.Remaining != 4 {
		t.Errorf("Redis back: %+v %v; want its own state, Remaining 4", r, err)
	}
	if n := twinKeys(); n < 100 {
		t.Errorf("%d keys left in the twin once Redis is back; want 100 or more", n)
	}
	if r := lim.local.Peek(time.Now(), "client-0"); r.Remaining != 4 {
		t.Errorf("the twin forgot what it admitted: %+v", r)
	}
}

// When Redis cannot be asked, Peek reports what Allow would decide: the
// failure mode's answer, naming the limit and the rule, with the error.
func TestPeekAnswersAsAllowWhenRedisIsDown(t *testing.T) {
	for _, mode := range []FailureMode{FailOpen, FailClosed} {
		lim := newOn(t, redistest.RefusedClient(t), GCRA, PerSecond(10), WithFailureMode(mode), WithTimeout(50*time.Millisecond))
		ctx := context.Background()
		p, perr := lim.Peek(ctx, "k")
		a, aerr := lim.Allow(ctx, "k")
		if perr == nil || aerr == nil {
			t.Fatalf("%v: errors %v and %v, want both", mode, perr, aerr)
		}
		if p.Allowed != a.Allowed || p.Limit != a.Limit || p.Rule != a.Rule || p.Rule == "" {
			t.Errorf("%v: Peek %+v, Allow %+v: want the same answer", mode, p, a)
		}
	}
}

// A Peek its caller's context ended answers as an Allow cut short does:
// not admitted, whatever the failure mode (on a key Redis denies, too).
func TestPeekCutShortAnswersAsAllow(t *testing.T) {
	lim := newOn(t, redistest.Client(t), GCRA, PerHour(1), WithFailureMode(FailOpen),
		WithPrefix(fmt.Sprintf("peek-cut-%d", time.Now().UnixNano())))
	ctx := context.Background()
	lim.Allow(ctx, "k")
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	p, perr := lim.Peek(canceled, "k")
	a, aerr := lim.Allow(canceled, "k")
	if !errors.Is(perr, context.Canceled) || !errors.Is(aerr, context.Canceled) || p.Allowed || a.Allowed {
		t.Errorf("canceled: Peek %+v %v, Allow %+v %v; want both not allowed, context.Canceled", p, perr, a, aerr)
	}
}

// A denial the deny cache holds is what Allow answers while it lasts, with
// Redis down too: so does Peek.
func TestPeekAnswersFromTheDenyCache(t *testing.T) {
	for _, mode := range []FailureMode{FailOpen, FailLocal} {
		srv := redistest.StartT(t)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
		defer client.Close()
		lim := newOn(t, client, GCRA, PerHour(1), WithDenyCache(10), WithFailureMode(mode), WithTimeout(time.Second))
		ctx := context.Background()
		lim.Allow(ctx, "k")
		if res, err := lim.Allow(ctx, "k"); err != nil || res.Allowed {
			t.Fatalf("%v: second request %+v %v; want denied by Redis", mode, res, err)
		}
		srv.Stop()
		a, aerr := lim.Allow(ctx, "k")
		p, perr := lim.Peek(ctx, "k")
		if a.Allowed || aerr != nil || p.Allowed != a.Allowed || (perr == nil) != (aerr == nil) {
			t.Errorf("%v, Redis down, a denial cached: Allow %+v %v, Peek %+v %v; want the same, the cached denial", mode, a, aerr, p, perr)
		}
	}
}
