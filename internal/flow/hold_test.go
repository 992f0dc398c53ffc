package flow

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
)

// heldFlow is a middleware flow over a LeakyBucket limiter built without
// core.WithMaxDelay (as New takes it), at 1/s with room for burst, with
// WithMaxHold(1.5s), on a miniredis whose clock the test moves; requests
// cost cost. Requests held longer than the hold are denied after the
// decision, their places kept (see overDelay). denied holds the last
// denial's Result.
func heldFlow(t *testing.T, burst, cost int) (f *Flow, m *miniredis.Miniredis, denied *core.Result) {
	m = miniredis.RunT(t)
	m.SetTime(time.Unix(1_800_000_000, 0))
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	lim, err := core.New(c, core.LeakyBucket, core.Limit{Rate: 1, Period: time.Second, Burst: burst}, core.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	denied = new(core.Result)
	f = New(lim, []Option{
		WithMaxHold(1500 * time.Millisecond),
		WithCost(func(*http.Request) int { return cost }),
		WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, res core.Result) {
			*denied = res
			w.WriteHeader(http.StatusTooManyRequests)
		}),
	})
	f.cfg.Sleep = func(context.Context, time.Duration) error { return nil }
	return f, m, denied
}

// A request held past the hold is denied with the RetryAfter after which
// the same request is admitted: its own places, taken in the bucket, drain
// first. With a cost above 1 it said one drain interval, too soon: the
// retry was denied again, and took more places.
func TestOverHoldRetryAfterCountsTheCost(t *testing.T) {
	for _, cost := range []int{1, 3} {
		f, m, denied := heldFlow(t, 10, cost)
		admit := func() (bool, string) {
			rec := httptest.NewRecorder()
			ok := f.Admit(rec, httptest.NewRequest(http.MethodGet, "/", nil), nil)
			return ok, rec.Header().Get("RateLimit")
		}
		if ok, _ := admit(); !ok {
			t.Fatalf("cost %d: the first request was denied", cost)
		}
		var ratelimit string
		for i := 0; ; i++ {
			ok, h := admit()
			if !ok {
				ratelimit = h
				break
			}
			if i > 10 {
				t.Fatalf("cost %d: never held past 1.5s", cost)
			}
		}
		if !strings.Contains(ratelimit, "r=0") {
			t.Errorf("cost %d: a request held past the hold was answered RateLimit %q; want r=0 (every next one is held as long)", cost, ratelimit)
		}
		retry := denied.RetryAfter
		m.SetTime(time.Unix(1_800_000_000, 0).Add(retry))
		if ok, _ := admit(); !ok {
			t.Errorf("cost %d: denied with RetryAfter %s, retried after exactly that: denied again (RetryAfter %s)", cost, retry, denied.RetryAfter)
		}
	}
}

// A full bucket's denial (Redis's) says when a request fits within the
// hold, not only when a place frees: a request taking the first free
// place waits for the queue ahead of it. It said the latter, and a retry
// on time was held past the hold, denied, its place taken.
func TestFullBucketRetryAfterCountsTheHold(t *testing.T) {
	f, m, denied := heldFlow(t, 3, 1)
	admit := func() bool {
		return f.Admit(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil), nil)
	}
	for range 3 {
		admit() // delays 0, 1s, 2s: the last held past the hold, denied, its place kept
	}
	if admit() {
		t.Fatal("admitted into a full bucket")
	}
	retry := denied.RetryAfter
	m.SetTime(time.Unix(1_800_000_000, 0).Add(retry))
	if !admit() {
		t.Errorf("a full bucket said RetryAfter %s; retried then, held past the hold and denied again (RetryAfter %s)", retry, denied.RetryAfter)
	}
}

// In a policy, a LeakyBucket rule that admits while another rule denies
// may still hold the retry past the hold: its queue ahead counts too. The
// denial said the other rule's RetryAfter (0.8s), and the retry then was
// held past the hold, denied, its place taken; a limiter built with
// core.WithMaxDelay says 7.3s.
func TestPolicyRetryAfterCountsTheHold(t *testing.T) {
	m := miniredis.RunT(t)
	t0 := time.Unix(1_800_000_000, 0) // a multiple of 2s: a window starts
	m.SetTime(t0)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	rules := []core.Rule{
		{Name: "lb", Algorithm: core.LeakyBucket, Limit: core.Limit{Rate: 1, Period: time.Second, Burst: 10}},
		{Name: "fw", Algorithm: core.FixedWindow, Limit: core.Limit{Rate: 10, Period: 2 * time.Second}},
	}
	lim, err := core.NewPolicy(c, rules, core.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var denied core.Result
	f := New(lim, []Option{
		WithMaxHold(1500 * time.Millisecond),
		WithKey(func(*http.Request) (string, error) { return "k", nil }),
		WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, res core.Result) {
			denied = res
			w.WriteHeader(http.StatusTooManyRequests)
		}),
	})
	f.cfg.Sleep = func(context.Context, time.Duration) error { return nil }
	admit := func() bool {
		return f.Admit(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil), nil)
	}
	// the bucket full and the window's count spent
	if res, err := lim.AllowN(context.Background(), "k", 10); err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	m.SetTime(t0.Add(1200 * time.Millisecond))
	if admit() {
		t.Fatal("admitted past the window's count")
	}
	retry := denied.RetryAfter
	m.SetTime(t0.Add(1200 * time.Millisecond).Add(retry))
	if !admit() {
		t.Errorf("denied with RetryAfter %s; retried then, held past the hold and denied again (RetryAfter %s)", retry, denied.RetryAfter)
	}
}

// A rule that heldRetry makes deny, tied on RetryAfter with the rule that
// denied, is named as core names ties, the earlier rule: as a limiter
// built with core.WithMaxDelay names it.
func TestHeldRetryTieGoesToTheEarlierRule(t *testing.T) {
	rules := []core.Rule{
		{Name: "lb", Algorithm: core.LeakyBucket, Limit: core.Limit{Rate: 1, Period: time.Second, Burst: 10}},
		{Name: "fw", Algorithm: core.FixedWindow, Limit: core.Limit{Rate: 10, Period: 2 * time.Second}},
	}
	t0 := time.Unix(1_800_000_000, 0) // a multiple of 2s: a window starts
	decide := func(opts ...core.Option) (core.Result, *Flow) {
		m := miniredis.RunT(t)
		m.SetTime(t0)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		lim, err := core.NewPolicy(c, rules, append(opts, core.WithTimeout(10*time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := lim.AllowN(context.Background(), "k", 10); err != nil || !res.Allowed {
			t.Fatal(res, err)
		}
		m.SetTime(t0.Add(1200 * time.Millisecond))
		res, err := lim.AllowN(context.Background(), "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		return res, New(lim, []Option{WithMaxHold(8 * time.Second)})
	}
	want, _ := decide(core.WithMaxDelay(8 * time.Second))
	res, f := decide()
	got := f.heldRetry(res, f.limiter)
	if got.Rule != want.Rule || got.RetryAfter != want.RetryAfter {
		t.Errorf("heldRetry: rule %q, RetryAfter %s; a limiter built with WithMaxDelay says %q, %s", got.Rule, got.RetryAfter, want.Rule, want.RetryAfter)
	}
}
