package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func newOn(t *testing.T, client redis.UniversalClient, alg Algorithm, l Limit, opts ...Option) *Limiter {
	t.Helper()
	lim, err := New(client, alg, l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func TestPolicyAllOrNothing(t *testing.T) {
	clk, client := newClock(t)
	clk.advance(day0.Sub(clk.now))
	rules := []Rule{
		{Name: "second", Algorithm: TokenBucket, Limit: PerSecond(2)},
		{Name: "minute", Algorithm: FixedWindow, Limit: PerMinute(3)},
	}
	lim, err := NewPolicy(client, rules)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	type want struct {
		allowed         bool
		rule            string
		remaining       int
		second, minute  int // each rule's Remaining
		secondOK, minOK bool
	}
	steps := []struct {
		at time.Duration
		want
	}{
		{0, want{true, "second", 1, 1, 2, true, true}},
		{0, want{true, "second", 0, 0, 1, true, true}},
		// the per-second rule denies, so the per-minute rule must not consume
		{0, want{false, "second", 0, 0, 1, false, true}},
		{s, want{true, "minute", 0, 1, 0, true, true}},
		// now the per-minute rule denies: the per-second rule keeps its tokens
		{2 * s, want{false, "minute", 0, 2, 0, true, false}},
	}
	for i, st := range steps {
		clk.advance(day0.Add(st.at).Sub(clk.now))
		r, err := lim.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		got := want{r.Allowed, r.Rule, r.Remaining, r.Rules[0].Remaining, r.Rules[1].Remaining, r.Rules[0].Allowed, r.Rules[1].Allowed}
		if got != st.want {
			t.Errorf("step %d: got %+v, want %+v", i, got, st.want)
		}
	}
	// The denial's RetryAfter is the longest one: the minute's end.
	r, _ := lim.Peek(ctx, "k")
	if r.Allowed || r.RetryAfter != 58*s || r.Rule != "minute" || r.Limit != PerMinute(3).withBurst() {
		t.Errorf("peek after the minute is used up: %+v", r)
	}
}

func (l Limit) withBurst() Limit {
	if l.Burst == 0 {
		l.Burst = l.Rate
	}
	return l
}

func TestRemainingAfterFirstEvent(t *testing.T) {
	// PerSecond(10) leaves 9 after one event for every algorithm; float
	// truncation once made that 8.
	_, client := newClock(t)
	for _, alg := range Algorithms() {
		r, err := newOn(t, client, alg, PerSecond(10)).Allow(context.Background(), "k")
		if err != nil || !r.Allowed || r.Remaining != 9 {
			t.Errorf("%s: %+v, %v; want allowed with Remaining 9", alg, r, err)
		}
		r, err = newOn(t, client, alg, PerMinute(5)).AllowN(context.Background(), "k2", 2)
		if err != nil || r.Remaining != 3 {
			t.Errorf("%s: PerMinute(5) after two events: Remaining %d, %v; want 3", alg, r.Remaining, err)
		}
	}
}

func TestCost(t *testing.T) {
	_, client := newClock(t)
	ctx := context.Background()
	for _, alg := range Algorithms() {
		lim := newOn(t, client, alg, PerSecond(5))
		for _, n := range []int{0, -1} {
			if _, err := lim.AllowN(ctx, "k", n); err == nil || errors.Is(err, ErrCostExceedsLimit) || !strings.Contains(err.Error(), "must be positive") {
				t.Errorf("%s: AllowN(%d): %v", alg, n, err)
			}
			if err := lim.WaitN(ctx, "k", n); err == nil || !strings.Contains(err.Error(), "must be positive") {
				t.Errorf("%s: WaitN(%d): %v", alg, n, err)
			}
		}
		if _, err := lim.AllowN(ctx, "k", 6); !errors.Is(err, ErrCostExceedsLimit) {
			t.Errorf("%s: AllowN(6) of 5: %v", alg, err)
		}
		if err := lim.WaitN(ctx, "k", 6); !errors.Is(err, ErrCostExceedsLimit) {
			t.Errorf("%s: WaitN(6) of 5: %v", alg, err) // at once, never blocking forever
		}
		if r, err := lim.AllowN(ctx, "k", 5); err != nil || !r.Allowed || r.Remaining != 0 {
			t.Errorf("%s: AllowN(5) of 5: %+v %v", alg, r, err)
		}
	}
	lim := newOn(t, client, TokenBucket, Limit{Rate: 1, Period: s, Burst: 4})
	if _, err := lim.AllowN(ctx, "k", 4); err != nil {
		t.Errorf("burst is the capacity: %v", err)
	}
}

func TestPeekChangesNothing(t *testing.T) {
	clk, client := newClock(t)
	ctx := context.Background()
	for _, alg := range Algorithms() {
		lim := newOn(t, client, alg, PerMinute(5), WithPrefix("peek"))
		r, err := lim.Peek(ctx, "fresh")
		if err != nil || !r.Allowed || r.Remaining != 5 || r.ResetAfter != 0 {
			t.Errorf("%s: peek of a fresh key: %+v %v", alg, r, err)
		}
		if keys := clk.m.Keys(); len(keys) != 0 {
			t.Fatalf("%s: peek created keys %v", alg, keys)
		}
		lim.AllowN(ctx, "k", 2)
		before := clk.m.Dump()
		for i := 0; i < 3; i++ {
			if r, _ := lim.Peek(ctx, "k"); r.Remaining != 3 {
				t.Errorf("%s: peek %d: Remaining %d, want 3", alg, i, r.Remaining)
			}
		}
		if after := clk.m.Dump(); after != before {
			t.Errorf("%s: peek changed Redis:\n%s\n%s", alg, before, after)
		}
		if r, _ := lim.Allow(ctx, "k"); r.Remaining != 2 {
			t.Errorf("%s: allow after peeks: Remaining %d, want 2", alg, r.Remaining)
		}
		clk.m.FlushAll()
	}
}

func TestReset(t *testing.T) {
	clk, client := newClock(t)
	ctx := context.Background()
	rules := []Rule{
		{Name: "a", Algorithm: SlidingWindowLog, Limit: PerMinute(2)},
		{Name: "b", Algorithm: GCRA, Limit: PerHour(2)},
		{Name: "c", Algorithm: LeakyBucket, Limit: PerHour(2)},
	}
	lim, _ := NewPolicy(client, rules)
	other, _ := NewPolicy(client, rules)
	lim.AllowN(ctx, "k", 2)
	lim.AllowN(ctx, "other", 1)
	if r, _ := lim.Allow(ctx, "k"); r.Allowed {
		t.Fatal("not exhausted")
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if r, _ := other.Allow(ctx, "k"); !r.Allowed || r.Remaining != 1 {
		t.Errorf("after Reset: %+v", r)
	}
	if r, _ := lim.Peek(ctx, "other"); r.Remaining != 1 {
		t.Errorf("Reset touched another key: %+v", r)
	}
	for _, k := range clk.m.Keys() {
		if !strings.Contains(k, "{k}") && !strings.Contains(k, "{other}") {
			t.Errorf("unexpected key %q", k)
		}
	}
}

func TestKeys(t *testing.T) {
	clk, client := newClock(t)
	ctx := context.Background()
	huge := strings.Repeat("x", 1<<20)
	keys := []string{"", "a", "#a", "a}b{c", "{", "}", "\x00\xff", "ключ", huge, huge + "y",
		strings.Repeat("y", maxRawKey), strings.Repeat("y", maxRawKey+1)}
	lim := newOn(t, client, TokenBucket, PerMinute(len(keys)+1))
	for i, k := range keys {
		// Each key takes i+1 events; if two keys shared state, a later key
		// would see fewer than it should.
		r, err := lim.AllowN(ctx, k, i+1)
		if err != nil || !r.Allowed || r.Remaining != len(keys)-i {
			t.Errorf("key %d (%.20q): %+v %v", i, k, r, err)
		}
	}
	if got := len(clk.m.Keys()); got != len(keys) {
		t.Errorf("%d Redis keys for %d user keys", got, len(keys))
	}
	for _, k := range clk.m.Keys() {
		if len(k) > 120 {
			t.Errorf("Redis key of %d bytes: %.40q…", len(k), k)
		}
		// One hash tag per key: what Redis Cluster hashes is between the
		// first '{' and the next '}', and must not be empty.
		open := strings.IndexByte(k, '{')
		end := strings.IndexByte(k[open+1:], '}')
		if open < 0 || end <= 0 || !strings.HasPrefix(k[open+1+end:], "}:"+lim.fp+":") {
			t.Errorf("key %q has no usable hash tag", k)
		}
	}
}

func TestLimitersDoNotCollide(t *testing.T) {
	_, client := newClock(t)
	ctx := context.Background()
	global := newOn(t, client, TokenBucket, PerMinute(100))
	login := newOn(t, client, TokenBucket, PerMinute(3))
	loginWindow := newOn(t, client, FixedWindow, PerMinute(3))
	for i := 0; i < 3; i++ {
		login.Allow(ctx, "203.0.113.7")
	}
	if r, _ := global.Allow(ctx, "203.0.113.7"); r.Remaining != 99 {
		t.Errorf("the global limit saw the login limit's events: %+v", r)
	}
	if r, err := loginWindow.Allow(ctx, "203.0.113.7"); err != nil || r.Remaining != 2 {
		t.Errorf("same limit, another algorithm: %+v %v", r, err)
	}
	// The same rules under the same prefix share state on purpose.
	again := newOn(t, client, TokenBucket, PerMinute(3))
	if r, _ := again.Allow(ctx, "203.0.113.7"); r.Allowed {
		t.Errorf("a second instance of the login limit did not share state: %+v", r)
	}
	// A different prefix does not.
	if r, _ := newOn(t, client, TokenBucket, PerMinute(3), WithPrefix("svc2")).Allow(ctx, "203.0.113.7"); !r.Allowed {
		t.Errorf("another prefix shared state: %+v", r)
	}
}

// The window algorithms set a key's TTL with the first write of a window
// and keep it on the others (SET ... KEEPTTL): after every write, the key
// must expire exactly when its window says, never with an earlier window's
// end (that would forget the count) and never later. Alone and in a policy,
// whose requests take the multi-rule path.
func TestWindowKeysExpireWithTheirWindow(t *testing.T) {
	// ends returns when a key written now must expire.
	ends := map[Algorithm]func(now time.Time, period time.Duration) time.Time{
		FixedWindow: func(now time.Time, p time.Duration) time.Time {
			return now.Truncate(p).Add(p)
		},
		SlidingWindowCounter: func(now time.Time, p time.Duration) time.Time {
			return now.Truncate(p).Add(2 * p) // its count is weighed through the next window
		},
	}
	for _, rules := range [][]Rule{
		{{Name: "fw", Algorithm: FixedWindow, Limit: PerSecond(100)}},
		{{Name: "swc", Algorithm: SlidingWindowCounter, Limit: PerSecond(100)}},
		{{Name: "s", Algorithm: FixedWindow, Limit: PerSecond(100)}, {Name: "m", Algorithm: SlidingWindowCounter, Limit: Limit{Rate: 1000, Period: 3 * s}}},
	} {
		clk, client := newClock(t)
		lim, err := NewPolicy(client, rules)
		if err != nil {
			t.Fatal(err)
		}
		keys := lim.keys("k")
		allow := func(step string) {
			t.Helper()
			if r, err := lim.Allow(context.Background(), "k"); err != nil || !r.Allowed {
				t.Fatalf("%v %s: %+v %v", rules, step, r, err)
			}
			for i, rule := range rules {
				want := ends[rule.Algorithm](clk.now, rule.Limit.Period).Sub(clk.now)
				if ttl := clk.m.TTL(keys[i]); ttl < want || ttl >= want+ms {
					t.Fatalf("%v %s: %s key's TTL %s, want %s (to the end of its window)", rules, step, rule.Algorithm, ttl, want)
				}
			}
		}
		for step := 0; step < 40; step++ {
			allow(fmt.Sprintf("step %d", step))
			clk.advance(130 * ms) // windows change every few steps, mid-step
		}
		// A TTL is whole milliseconds, rounded up: a key written at
		// x.000457s lives until 457µs past its window's end. A write in
		// that moment belongs to the next window, and must not keep it.
		allow("before the window's end")
		clk.advance(ends[FixedWindow](clk.now, rules[0].Limit.Period).Sub(clk.now) + 100*time.Microsecond)
		allow("100µs past the window's end")
	}
}

// The meters set a key's expiry at the end of the period-long cell (cells
// aligned to the Unix epoch) that holds the instant their state is back to
// untouched, and keep it (INCRBY, SET ... KEEPTTL) while later writes are
// back to untouched within the same cell; so does the sliding log, for the
// instant its newest event leaves the window, and it also removes the
// requests gone from the window (all but the newest) only when its expiry
// moves. After every
// write the key lives as long as its state needs and less than a period
// more, and its expiry moves once per cell. Alone and in a policy, whose
// requests take the multi-rule path; with debt carried from write to
// write, then with a bucket back to untouched before every write.
func TestKeysExpireAtTheirCellsEnd(t *testing.T) {
	const period = time.Second
	for _, alg := range []Algorithm{LeakyBucket, TokenBucket, GCRA, SlidingWindowLog} {
		limit := PerSecond(100)
		if alg == SlidingWindowLog {
			limit = PerSecond(1000) // the debt phase's 143 events a second
		}
		meter := Rule{Name: "m", Algorithm: alg, Limit: limit}
		for _, rules := range [][]Rule{{meter}, {meter, {Name: "w", Algorithm: FixedWindow, Limit: PerSecond(1000)}}} {
			clk, client := newClock(t)
			lim, err := NewPolicy(client, rules)
			if err != nil {
				t.Fatal(err)
			}
			key := lim.keys("k")[0]
			clk.advance(clk.now.Truncate(period).Add(period + 5*ms).Sub(clk.now))
			var expiry time.Time
			cells, moves := map[time.Time]bool{}, 0
			write := func(step string) {
				t.Helper()
				r, err := lim.Allow(context.Background(), "k")
				if err != nil || !r.Allowed {
					t.Fatalf("%v %s: %+v %v", rules, step, r, err)
				}
				need := r.Rules[0].ResetAfter
				cell := clk.now.Add(need).Truncate(period)
				cells[cell] = true
				ttl := clk.m.TTL(key)
				if ttl < need || ttl >= need+period+ms {
					t.Fatalf("%v %s: TTL %s for a state back to untouched in %s", rules, step, ttl, need)
				}
				if e := clk.now.Add(ttl); !e.Equal(expiry) {
					moves++
					expiry = e
					if end := cell.Add(period); e.Before(end) || !e.Before(end.Add(ms)) {
						t.Fatalf("%v %s: the key expires at %s, want the end of its cell, %s", rules, step, e, end)
					}
					if alg == SlidingWindowLog {
						// Of the requests gone from the window, the set keeps the
						// newest (and any of its time): its number counts the rest.
						gone := strconv.FormatInt(clk.now.Add(-period).UnixMicro(), 10)
						left := client.ZRangeByScoreWithScores(context.Background(), key, &redis.ZRangeBy{Min: "-inf", Max: gone}).Val()
						if len(left) > 0 && left[0].Score != left[len(left)-1].Score {
							t.Fatalf("%v %s: the expiry moved, and %d requests gone from the window, of several times, are still in the set", rules, step, len(left))
						}
					}
				}
			}
			// (Steps of a whole millisecond and a few microseconds: each
			// expiry written anew falls at a microsecond of its own, past
			// the cell's end, so an expiry kept is told from one rewritten.)
			// 10ms of debt per event, 7ms between events: debt grows
			// 3ms per event, and its end moves through three cells.
			for step := 0; step < 300; step++ {
				write(fmt.Sprintf("debt, step %d", step))
				clk.advance(7*ms + 37*time.Microsecond)
			}
			// Back to untouched between events, 50ms apart from x.005s
			// to about x.955s.
			clk.advance(clk.now.Truncate(period).Add(2*period + 5*ms).Sub(clk.now))
			for step := 0; step < 60; step++ {
				write(fmt.Sprintf("untouched, step %d", step))
				clk.advance(50*ms + 37*time.Microsecond)
			}
			if moves != len(cells) {
				t.Errorf("%v: the key's expiry moved %d times for states back to untouched in %d cells", rules, moves, len(cells))
			}
		}
	}
}

// TestTTLOnEveryKey checks the TTL of every key every algorithm writes:
// never missing, never 0, never longer than needed to forget the key.
func TestTTLOnEveryKey(t *testing.T) {
	limits := []Limit{PerSecond(10), {Rate: 5, Period: 500 * ms}, {Rate: 1, Period: ms}, PerHour(3), {Rate: 2, Period: s, Burst: 6}, {Rate: 10, Period: s, Burst: 2}}
	for _, alg := range Algorithms() {
		for _, l := range limits {
			if alg.windowed() && l.Burst != 0 {
				continue
			}
			clk, client := newClock(t)
			lim := newOn(t, client, alg, l)
			capacity := l.withBurst().Burst
			// The longest a key is kept: two windows for the counter, one
			// for the fixed window; for the sliding log, the period rounded
			// up to the end of a period-long cell; for the meters, the time
			// to refill Burst, rounded up to the end of a cell: the period,
			// or that time when it is shorter (see cell_ttl).
			bound := l.Period
			if alg == SlidingWindowCounter || alg == SlidingWindowLog {
				bound = 2 * l.Period
			}
			if !alg.windowed() {
				refill := time.Duration(int64(l.Period) * int64(capacity) / int64(l.Rate))
				bound = refill + min(refill, l.Period)
			}
			for i := 0; i < 2*capacity; i++ {
				lim.Allow(context.Background(), "k")
				for _, k := range clk.m.Keys() {
					ttl := clk.m.TTL(k)
					if ttl <= 0 || ttl > bound+ms {
						t.Fatalf("%s %s: key %s has TTL %s (bound %s)", alg, l, k, ttl, bound)
					}
				}
				clk.advance(l.Period / time.Duration(3*l.Rate))
			}
			if len(clk.m.Keys()) == 0 {
				t.Errorf("%s %s: no key written", alg, l)
			}
			clk.advance(bound + ms)
			if keys := clk.m.Keys(); len(keys) != 0 {
				t.Errorf("%s %s: keys outlive their use: %v", alg, l, keys)
			}
		}
	}
}

// The twin forgets keys whose state is back to untouched, a sweep once
// every max(1024, keys) decisions: memory follows the recently active keys,
// and a decision's share of the sweeps stays the same however many there
// are (a sweep every 64 decisions over 200,000 keys cost each 100µs).
func TestLocalForgetsIdleKeys(t *testing.T) {
	l, err := NewLocal([]Rule{{Name: "r", Algorithm: GCRA, Limit: PerSecond(10)}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	for i := 0; i < 5000; i++ {
		l.AllowN(t0, fmt.Sprint("client-", i), 1)
	}
	if len(l.keys) != 5000 {
		t.Fatalf("%d keys after 5000 clients; want 5000 (none expired yet)", len(l.keys))
	}
	later := t0.Add(time.Hour)
	for i := 0; i < 1000; i++ {
		l.AllowN(later, "busy", 1)
	}
	if len(l.keys) != 5001 {
		t.Errorf("%d keys after 1000 more decisions; want 5001: no sweep of 5000 keys within 1000 decisions", len(l.keys))
	}
	for i := 0; i < 5000; i++ {
		l.AllowN(later, "busy", 1)
	}
	if len(l.keys) != 1 {
		t.Errorf("%d keys after 6000 decisions an hour later; want 1, the idle clients forgotten", len(l.keys))
	}
}

// A nil client, also a nil *redis.Client in the interface, is an invalid
// configuration, not a panic; a nil Option is ignored, by NewLocal too.
func TestNilClientAndOption(t *testing.T) {
	var nilClient *redis.Client
	if _, err := New(nilClient, GCRA, PerSecond(1)); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil *redis.Client: %v; want ErrInvalidConfig", err)
	}
	_, client := newClock(t)
	if _, err := New(client, GCRA, PerSecond(1), nil); err != nil {
		t.Errorf("nil Option: %v", err)
	}
	rules := []Rule{{Name: "r", Algorithm: GCRA, Limit: PerSecond(1)}}
	if _, err := NewLocal(rules, nil); err != nil {
		t.Errorf("NewLocal with a nil Option: %v", err)
	}
}

// INCR followed by a separate EXPIRE leaves a key without TTL forever when
// the second command is lost. Every write here happens in the one script
// that also sets the TTL; the real-Redis test checks the TTLs after a
// SCRIPT FLUSH in the middle of a run, and here no script source contains a
// write without its expiry.
func TestRegressionNoWriteWithoutTTL(t *testing.T) {
	for _, name := range scriptFiles {
		src, _ := luaFiles.ReadFile("lua/" + name)
		text := string(src)
		writes := strings.Count(text, "redis.call('HSET'") + strings.Count(text, "redis.call('ZADD'")
		expires := strings.Count(text, "redis.call('PEXPIRE', key, ttl_ms(")
		if writes > 0 && expires == 0 {
			t.Errorf("%s writes without setting an expiry", name)
		}
		if strings.Contains(text, "'INCR'") || strings.Contains(text, "'EXPIRE'") {
			t.Errorf("%s uses INCR or whole-second EXPIRE", name)
		}
		if strings.Contains(text, "redis.call('SET'") && !strings.Contains(text, "'PX'") {
			t.Errorf("%s SETs without PX", name)
		}
	}
}
