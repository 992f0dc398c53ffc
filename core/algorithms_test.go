package core

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// day0 is midnight UTC, so windows of every period in these tables start at
// the table's time 0.
var day0 = time.Unix(1763683200, 0)

// step is one request of a table: at a time since day0, n events (0 means
// Peek), and the expected answer.
type step struct {
	at        time.Duration
	n         int
	allowed   bool
	remaining int
	retry     time.Duration // expected RetryAfter
	delay     time.Duration // expected Delay
}

type table struct {
	name  string
	alg   Algorithm
	limit Limit
	steps []step
	opts  []Option
}

const (
	ms = time.Millisecond
	s  = time.Second
)

var tables = []table{
	{"fixed window: burst, deny until the window ends", FixedWindow, PerSecond(3), []step{
		{0, 1, true, 2, 0, 0}, {0, 1, true, 1, 0, 0}, {0, 1, true, 0, 0, 0},
		{0, 1, false, 0, s, 0}, {999999 * time.Microsecond, 1, false, 0, time.Microsecond, 0},
		{s, 1, true, 2, 0, 0},
	}, nil},
	{"fixed window: 2×rate across the window edge (documented weakness)", FixedWindow, PerSecond(3), []step{
		{999 * ms, 3, true, 0, 0, 0}, {s, 3, true, 0, 0, 0}, {s, 1, false, 0, s, 0},
	}, nil},
	{"fixed window: 5 per 500ms", FixedWindow, Limit{Rate: 5, Period: 500 * ms}, []step{
		{0, 5, true, 0, 0, 0}, {100 * ms, 1, false, 0, 400 * ms, 0}, {500 * ms, 1, true, 4, 0, 0},
	}, nil},
	{"fixed window: 3 per hour", FixedWindow, PerHour(3), []step{
		{0, 1, true, 2, 0, 0}, {20 * time.Minute, 2, true, 0, 0, 0},
		{30 * time.Minute, 1, false, 0, 30 * time.Minute, 0}, {time.Hour, 1, true, 2, 0, 0},
	}, nil},
	{"sliding log: each event leaves one period after it", SlidingWindowLog, PerSecond(3), []step{
		{0, 1, true, 2, 0, 0}, {100 * ms, 1, true, 1, 0, 0}, {200 * ms, 1, true, 0, 0, 0},
		{300 * ms, 1, false, 0, 700 * ms, 0}, {300 * ms, 0, false, 0, 700 * ms, 0},
		{s, 1, true, 0, 0, 0}, {1050 * ms, 1, false, 0, 50 * ms, 0},
		{1050 * ms, 2, false, 0, 150 * ms, 0}, {1200 * ms, 2, true, 0, 0, 0},
	}, nil},
	{"sliding log: 5 per 500ms", SlidingWindowLog, Limit{Rate: 5, Period: 500 * ms}, []step{
		{0, 5, true, 0, 0, 0}, {499 * ms, 1, false, 0, ms, 0}, {500 * ms, 1, true, 4, 0, 0},
	}, nil},
	{"sliding counter: the previous window weighs by overlap", SlidingWindowCounter, PerSecond(10), []step{
		{0, 10, true, 0, 0, 0}, {500 * ms, 1, false, 0, 600 * ms, 0},
		{1500 * ms, 0, true, 5, 0, 0}, {1500 * ms, 1, true, 4, 0, 0},
		{1500 * ms, 5, false, 4, 100 * ms, 0}, {1600 * ms, 5, true, 0, 0, 0},
	}, nil},
	{"sliding counter: 5 per 500ms", SlidingWindowCounter, Limit{Rate: 5, Period: 500 * ms}, []step{
		{0, 5, true, 0, 0, 0}, {0, 1, false, 0, 600 * ms, 0}, {600 * ms, 1, true, 0, 0, 0},
	}, nil},
	{"token bucket: burst, then one per interval", TokenBucket, PerSecond(10), []step{
		{0, 1, true, 9, 0, 0}, {0, 9, true, 0, 0, 0}, {0, 1, false, 0, 100 * ms, 0},
		{50 * ms, 1, false, 0, 50 * ms, 0}, {100 * ms, 1, true, 0, 0, 0},
		{100 * ms, 0, false, 0, 100 * ms, 0}, {1100 * ms, 0, true, 10, 0, 0},
	}, nil},
	{"token bucket: burst above rate", TokenBucket, Limit{Rate: 1, Period: s, Burst: 5}, []step{
		{0, 5, true, 0, 0, 0}, {0, 1, false, 0, s, 0}, {2500 * ms, 3, false, 2, 500 * ms, 0},
		{3 * s, 3, true, 0, 0, 0},
	}, nil},
	{"token bucket: 5 per 500ms", TokenBucket, Limit{Rate: 5, Period: 500 * ms}, []step{
		{0, 5, true, 0, 0, 0}, {0, 1, false, 0, 100 * ms, 0}, {100 * ms, 1, true, 0, 0, 0},
	}, nil},
	{"token bucket: cost n", TokenBucket, PerMinute(10), []step{
		{0, 4, true, 6, 0, 0}, {0, 7, false, 6, 6 * s, 0}, {6 * s, 7, true, 0, 0, 0},
	}, nil},
	{"token bucket: 3 per second is exact (1/3 s intervals)", TokenBucket, PerSecond(3), []step{
		{0, 3, true, 0, 0, 0}, {333333 * time.Microsecond, 1, false, 0, time.Microsecond, 0},
		{333334 * time.Microsecond, 1, true, 0, 0, 0}, {s, 2, true, 0, 0, 0},
	}, nil},
	{"gcra: 3 per hour", GCRA, PerHour(3), []step{
		{0, 1, true, 2, 0, 0}, {0, 2, true, 0, 0, 0}, {0, 1, false, 0, 20 * time.Minute, 0},
		{20 * time.Minute, 1, true, 0, 0, 0}, {25 * time.Minute, 1, false, 0, 15 * time.Minute, 0},
		{3 * time.Hour, 0, true, 3, 0, 0},
	}, nil},
	{"gcra: 5 per 500ms", GCRA, Limit{Rate: 5, Period: 500 * ms}, []step{
		{0, 5, true, 0, 0, 0}, {50 * ms, 1, false, 0, 50 * ms, 0}, {100 * ms, 1, true, 0, 0, 0},
	}, nil},
	{"leaky bucket: admitted requests wait their turn", LeakyBucket, PerSecond(10), []step{
		{0, 1, true, 9, 0, 0}, {0, 1, true, 8, 0, 100 * ms}, {0, 1, true, 7, 0, 200 * ms},
		{0, 7, true, 0, 0, 300 * ms}, {0, 1, false, 0, 100 * ms, 0},
		{100 * ms, 1, true, 0, 0, 900 * ms}, {2 * s, 1, true, 9, 0, 0},
	}, nil},
	{"leaky bucket: a delay past the bound is denied and consumes nothing", LeakyBucket, PerSecond(10), []step{
		{0, 1, true, 2, 0, 0}, {0, 1, true, 1, 0, 100 * ms}, {0, 1, true, 0, 0, 200 * ms},
		// a fourth would wait 300ms: denied until the wait is 250ms, and not
		// queued, so the answer stays the same
		{0, 1, false, 0, 50 * ms, 0}, {0, 1, false, 0, 50 * ms, 0},
		{100 * ms, 1, true, 0, 0, 200 * ms}, {150 * ms, 0, true, 1, 0, 250 * ms},
	}, []Option{WithMaxDelay(250 * ms)}},
	{"leaky bucket: 3 per hour", LeakyBucket, PerHour(3), []step{
		{0, 1, true, 2, 0, 0}, {0, 1, true, 1, 0, 20 * time.Minute}, {10 * time.Minute, 1, true, 0, 0, 30 * time.Minute},
	}, nil},
}

// runTable runs a table through the Redis script (on miniredis, with its
// clock set to each step's time) and through the twin.
func runTable(t *testing.T, tb table) {
	rules := []Rule{{Name: "r", Algorithm: tb.alg, Limit: tb.limit}}
	clk, client := newClock(t)
	clk.advance(day0.Sub(clk.now))
	lim, err := NewPolicy(client, rules, tb.opts...)
	if err != nil {
		t.Fatal(err)
	}
	twin, _ := NewLocal(rules, tb.opts...)
	ctx := context.Background()
	for i, st := range tb.steps {
		clk.advance(day0.Add(st.at).Sub(clk.now))
		var res, tw Result
		if st.n == 0 {
			res, err = lim.Peek(ctx, "k")
			tw = twin.Peek(clk.now, "k")
		} else {
			res, err = lim.AllowN(ctx, "k", st.n)
			tw, _ = twin.AllowN(clk.now, "k", st.n)
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got := fmt.Sprintf("allowed=%v remaining=%d retry=%s delay=%s", res.Allowed, res.Remaining, res.RetryAfter, res.Delay)
		want := fmt.Sprintf("allowed=%v remaining=%d retry=%s delay=%s", st.allowed, st.remaining, st.retry, st.delay)
		twinGot := fmt.Sprintf("allowed=%v remaining=%d retry=%s delay=%s", tw.Allowed, tw.Remaining, tw.RetryAfter, tw.Delay)
		if got != want || twinGot != want {
			t.Errorf("step %d (at %s, n=%d):\nscript %s\ntwin   %s\nwant   %s", i, st.at, st.n, got, twinGot, want)
		}
	}
}

func TestAlgorithms(t *testing.T) {
	for _, tb := range tables {
		t.Run(tb.name, func(t *testing.T) { runTable(t, tb) })
	}
}

// The meters (GCRA, TokenBucket, LeakyBucket) store their theoretical
// arrival time as one integer when their emission interval is a whole
// number of microseconds (10 per hour), and as "<ticks>:<remainder>" when
// it is not (7 per hour). Either form is read, whatever the limit: a key
// written as "<ticks>:0" decides as the same key written as "<ticks>". A
// write that keeps the key's TTL adds to the integer (INCRBY): the value
// must come out the same. A value of neither form reads as no state. On a
// real Redis (miniredis runs another Lua, whose tonumber and string.format
// the twin tests cover).
func TestMeterStateForms(t *testing.T) {
	for _, alg := range []Algorithm{GCRA, TokenBucket, LeakyBucket} {
		t.Run(string(alg), func(t *testing.T) { meterStateForms(t, alg) })
	}
}

func meterStateForms(t *testing.T, alg Algorithm) {
	c := redistest.Client(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("meter-forms-%d", time.Now().UnixNano())
	whole := newOn(t, c, alg, PerHour(10), WithPrefix(prefix))
	split := newOn(t, c, alg, PerHour(7), WithPrefix(prefix))
	for _, tc := range []struct {
		lim   *Limiter
		colon bool
	}{{whole, false}, {split, true}} {
		if _, err := tc.lim.AllowN(ctx, "a", 2); err != nil {
			t.Fatal(err)
		}
		v, err := c.Get(ctx, tc.lim.keys("a")[0]).Result()
		if err != nil || strings.Contains(v, ":") != tc.colon {
			t.Errorf("%v: Redis holds %q (%v); want a colon: %v", tc.lim.rules[0].Limit, v, err, tc.colon)
		}
	}
	v, _ := c.Get(ctx, whole.keys("a")[0]).Result()
	// One more event moves the TAT by its emission interval, 360s; within
	// the hour-long cell of the key's expiry, the expiry stays (INCRBY),
	// and past it moves to the end of the next hour.
	tat, _ := strconv.ParseInt(v, 10, 64)
	if err := c.Set(ctx, whole.keys("c")[0], v, c.PTTL(ctx, whole.keys("a")[0]).Val()).Err(); err != nil {
		t.Fatal(err)
	}
	ttl := c.PTTL(ctx, whole.keys("c")[0]).Val()
	if _, err := whole.Allow(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	const hour = int64(time.Hour / time.Microsecond)
	next, err := c.Get(ctx, whole.keys("c")[0]).Int64()
	ttl2 := c.PTTL(ctx, whole.keys("c")[0]).Val()
	if err != nil || next != tat+360_000_000 {
		t.Errorf("after one more event Redis holds %d (%v); want %d", next, err, tat+360_000_000)
	}
	if next/hour == tat/hour && (ttl2 > ttl || ttl2 < ttl-time.Second) {
		t.Errorf("the TAT moved within its hour, and the TTL from %v to %v; want it kept", ttl, ttl2)
	}
	if end := time.UnixMicro((next/hour + 1) * hour); next/hour != tat/hour && time.Until(end)-ttl2 > time.Second {
		t.Errorf("the TAT moved into the next hour, and the TTL to %v; want it to the hour's end, %v", ttl2, time.Until(end))
	}
	// A value that Lua reads as the TAT but Redis's INCRBY does not take
	// for an integer (written from outside): the write replaces it.
	if err := c.Set(ctx, whole.keys("d")[0], "0"+v, c.PTTL(ctx, whole.keys("a")[0]).Val()).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := whole.Allow(ctx, "d"); err != nil || !r.Allowed || r.Remaining != 7 {
		t.Errorf("over %q: %+v, %v; want admitted with 7 left", "0"+v, r, err)
	}
	if d, err := c.Get(ctx, whole.keys("d")[0]).Int64(); err != nil || d != tat+360_000_000 {
		t.Errorf("over %q Redis holds %d (%v); want %d", "0"+v, d, err, tat+360_000_000)
	}
	if err := c.Set(ctx, whole.keys("b")[0], v+":0", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b"} {
		r, err := whole.AllowN(ctx, key, 7)
		if err != nil || !r.Allowed || r.Remaining != 1 {
			t.Errorf("%s: %+v, %v; want admitted with 1 left of 10 after 2 and 7", key, r, err)
		}
	}
	// Neither form (a bucket's "<t>/<x>" of an earlier build, or anything
	// written from outside, numbers beyond any tick included): no state,
	// replaced with a TTL of its own.
	for _, v := range []string{"1a2b/3c", "garbage", "inf", "1e300", "99999999999999999999:1"} {
		if err := c.Set(ctx, whole.keys("e")[0], v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		r, err := whole.Allow(ctx, "e")
		if err != nil || !r.Allowed || r.Remaining != 9 {
			t.Errorf("over %q: %+v, %v; want admitted with 9 left", v, r, err)
		}
		if ttl := c.PTTL(ctx, whole.keys("e")[0]).Val(); ttl < r.ResetAfter || ttl > 2*time.Hour {
			t.Errorf("over %q: TTL %v; want from ResetAfter, %v, to the end of its hour", v, ttl, r.ResetAfter)
		}
	}
}

// A lone meter rule without a delay bound is decided by its lone loop
// (see lua/meter_lone.lua); in a policy of several rules, the same rule is decided
// by meter itself. Beside a rule that always admits, the two must answer
// and write alike: over every stored value (TATs ahead and behind, a
// clock stepped back behind the TAT, fractions, the "<ticks>:<rem>" form,
// values written from outside), for GCRA and LeakyBucket, for requests
// that consume one or several, and for Peek. On miniredis, whose clock
// stands still, so that both decide at the same instant.
func TestLoneMeterAnswersAsTheMeter(t *testing.T) {
	clk, c := newClock(t)
	ctx := context.Background()
	now := clk.now.UnixMicro()
	const event = int64(360_000_000) // microseconds
	values := []string{"", "5.5", "-12", "nan", "inf", "-inf", "1e300", "0x10", "garbage",
		fmt.Sprintf("%d.5", now+5*event), fmt.Sprintf("%d:7", now+2*event)}
	for k := int64(-2); k <= 12; k++ {
		values = append(values, strconv.FormatInt(now+k*event+k%3, 10))
	}
	ops := map[string]func(*Limiter, string) (Result, error){
		"Allow":     func(l *Limiter, key string) (Result, error) { return l.Allow(ctx, key) },
		"AllowN(3)": func(l *Limiter, key string) (Result, error) { return l.AllowN(ctx, key, 3) },
		"Peek":      func(l *Limiter, key string) (Result, error) { return l.Peek(ctx, key) },
	}
	for _, alg := range []Algorithm{GCRA, LeakyBucket} {
		rule := Rule{Name: "r", Algorithm: alg, Limit: Limit{Rate: 10, Period: time.Hour, Burst: 10}}
		lone, err := NewPolicy(c, []Rule{rule}, WithPrefix("lone"))
		if err != nil {
			t.Fatal(err)
		}
		open := Rule{Name: "open", Algorithm: FixedWindow, Limit: PerSecond(1_000_000)}
		inPolicy, err := NewPolicy(c, []Rule{rule, open}, WithPrefix("policy"))
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range values {
			for name, op := range ops {
				key := fmt.Sprintf("%s-%d-%s", alg, i, name)
				var got [2]RuleResult
				var stored [2]string
				var ttl [2]time.Duration
				for j, lim := range []*Limiter{lone, inPolicy} {
					rk := lim.keys(key)[0]
					if v != "" {
						if err := c.Set(ctx, rk, v, 2*time.Hour).Err(); err != nil {
							t.Fatal(err)
						}
					}
					r, err := op(lim, key)
					if err != nil {
						t.Fatalf("%s over %q, %s: %v", alg, v, name, err)
					}
					got[j], stored[j], ttl[j] = r.Rules[0], c.Get(ctx, rk).Val(), c.PTTL(ctx, rk).Val()
				}
				if got[0] != got[1] {
					t.Errorf("%s over %q, %s:\n alone     %+v\n in policy %+v", alg, v, name, got[0], got[1])
				}
				if stored[0] != stored[1] || ttl[0] != ttl[1] {
					t.Errorf("%s over %q, %s: alone wrote %q (TTL %v), in a policy %q (TTL %v)", alg, v, name, stored[0], ttl[0], stored[1], ttl[1])
				}
			}
		}
	}
}

// FixedWindow stores its count with its window's tag as one integer
// (tag × 2^32 + count), and a request that consumes takes its events with
// INCRBY first, giving them back when they are not admissible. These are
// the cases around it, on a real Redis: the count and TTL after admitted
// and denied requests, a past window's value still alive (the TTL set
// anew, to the window's end), a value of the current window in the string
// form "<window>:<count>" (read, and rewritten as an integer with its TTL
// kept), and the rules that keep the string form: a rate of 2^31 or more,
// and a period under 164.795ms. The checks compare tags and TTLs with the
// current hour's, so the test keeps clear of the hour's last seconds.
func TestFixedWindowStateForms(t *testing.T) {
	c := redistest.Client(t)
	avoidWindowEdge(t, c, time.Hour)
	prefix := fmt.Sprintf("fw-forms-%d", time.Now().UnixNano())
	ctx := context.Background()
	lim := newOn(t, c, FixedWindow, PerHour(10), WithPrefix(prefix))
	key := func(k string) string { return lim.keys(k)[0] }
	get := func(k string) (int64, time.Duration) {
		t.Helper()
		v, err := c.Get(ctx, key(k)).Int64()
		if err != nil {
			t.Errorf("%s: %v; want an integer", k, err)
		}
		return v, c.PTTL(ctx, key(k)).Val()
	}

	// Admitted, then denied at the limit: the count stays 10 and the TTL
	// stays the window's end.
	if r, err := lim.AllowN(ctx, "a", 2); err != nil || !r.Allowed || r.Remaining != 8 {
		t.Errorf("AllowN 2: %+v, %v; want admitted with 8 left", r, err)
	}
	v, ttl := get("a")
	tag := v >> 32
	if v&(1<<32-1) != 2 || tag < 1 || tag > 1<<20 || ttl <= 0 || ttl > time.Hour {
		t.Errorf("after 2 events Redis holds %d (tag %d) with TTL %v; want count 2, a tag in 1..2^20, a TTL within the hour", v, tag, ttl)
	}
	if r, err := lim.AllowN(ctx, "a", 8); err != nil || !r.Allowed || r.Remaining != 0 {
		t.Errorf("AllowN 8: %+v, %v; want admitted with 0 left", r, err)
	}
	r, err := lim.Allow(ctx, "a")
	if err != nil || r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 || r.RetryAfter > time.Hour || r.ResetAfter != r.RetryAfter {
		t.Errorf("Allow at the limit: %+v, %v; want denied until the window's end", r, err)
	}
	if v2, ttl2 := get("a"); v2 != v+8 || ttl2 <= 0 || ttl2 > ttl {
		t.Errorf("after a denial Redis holds %d with TTL %v; want %d (the denied event given back) with the TTL kept", v2, ttl2, v+8)
	}
	if p, err := lim.Peek(ctx, "a"); err != nil || p.Allowed || p.Remaining != 0 {
		t.Errorf("Peek at the limit: %+v, %v; want denied, 0 left", p, err)
	}

	// A past window's value, alive until its TTL (two hours here, past
	// this window's end): this window starts over, and the TTL is set
	// anew to the window's end.
	past := tag - 1
	if past == 0 {
		past = 1 << 20
	}
	if err := c.Set(ctx, key("b"), past<<32+7, 2*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := lim.Allow(ctx, "b"); err != nil || !r.Allowed || r.Remaining != 9 {
		t.Errorf("Allow over a past window's count of 7: %+v, %v; want admitted with 9 left", r, err)
	}
	if v, ttl := get("b"); v != tag<<32+1 || ttl <= 0 || ttl > time.Hour {
		t.Errorf("Redis holds %d (TTL %v); want this window's tag with count 1, a TTL to the window's end", v, ttl)
	}

	// The string form of this window, with a TTL shorter than the
	// window's: read, and rewritten as an integer with that TTL kept.
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	w := now.UnixMicro() / time.Hour.Microseconds()
	short := (time.UnixMicro((w+1)*time.Hour.Microseconds()).Sub(now) / 2).Truncate(time.Millisecond)
	if err := c.Set(ctx, key("c"), fmt.Sprintf("%d:4", w), short).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := lim.Allow(ctx, "c"); err != nil || !r.Allowed || r.Remaining != 5 {
		t.Errorf("Allow over the string form's count of 4: %+v, %v; want admitted with 5 left", r, err)
	}
	if v, ttl := get("c"); v != tag<<32+5 || ttl <= 0 || ttl > short {
		t.Errorf("Redis holds %d (TTL %v); want this window's tag with count 5, the TTL of %v kept", v, ttl, short)
	}

	// This window's count written from outside with a leading zero: Lua
	// reads it as the count, Redis's INCRBY refuses it, and the write
	// replaces it, its TTL kept.
	if err := c.Set(ctx, key("e"), fmt.Sprintf("0%d", tag<<32+4), short).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := lim.Allow(ctx, "e"); err != nil || !r.Allowed || r.Remaining != 5 {
		t.Errorf("Allow over \"0\" and a count of 4: %+v, %v; want admitted with 5 left", r, err)
	}
	if v, ttl := get("e"); v != tag<<32+5 || ttl <= 0 || ttl > short {
		t.Errorf("Redis holds %d (TTL %v); want this window's tag with count 5, the TTL of %v kept", v, ttl, short)
	}

	// The string form stays for a rate of 2^31 or more, and for a period
	// under 164.795ms.
	for _, tc := range []struct {
		l    Limit
		n    int
		want string
	}{{PerHour(1 << 31), 3, ":3"}, {Limit{Rate: 5, Period: 164 * time.Millisecond}, 2, ":2"}} {
		other := newOn(t, c, FixedWindow, tc.l, WithPrefix(prefix))
		if r, err := other.AllowN(ctx, "d", tc.n); err != nil || !r.Allowed {
			t.Errorf("%v: AllowN %d: %+v, %v", tc.l, tc.n, r, err)
		}
		if v, err := c.Get(ctx, other.keys("d")[0]).Result(); err != nil || !strings.HasSuffix(v, tc.want) {
			t.Errorf("%v: Redis holds %q (%v); want \"<window>%s\"", tc.l, v, err, tc.want)
		}
	}
}

// SlidingWindowCounter stores its window's tag and its two counts as one
// integer ((tag × place + previous) × place + current, place 32 for a rate
// of 10), and a request that consumes takes its events with INCRBY first,
// giving them back when they are not admissible. These are the cases
// around it, on a real Redis: the counts and TTL after admitted and denied
// requests; the previous window's value (its count becomes the previous
// one, the TTL set anew), and a denial over it (the value and TTL left as
// they were); a value of the current window in the string form (read, and
// rewritten as an integer with its TTL kept); and the string form kept for
// a rate of 2^20 or more.
func TestSlidingWindowCounterStateForms(t *testing.T) {
	c := redistest.Client(t)
	avoidWindowEdge(t, c, time.Hour)
	prefix := fmt.Sprintf("swc-forms-%d", time.Now().UnixNano())
	ctx := context.Background()
	lim := newOn(t, c, SlidingWindowCounter, PerHour(10), WithPrefix(prefix))
	const place, tags = 32, 1<<43 - 1
	if p, n := counterLayout(10); p != place || n != tags {
		t.Fatalf("counterLayout(10) = %d, %d; want %d, %d", p, n, place, tags)
	}
	key := func(k string) string { return lim.keys(k)[0] }
	get := func(k string) (tag, prev, cur int64, ttl time.Duration) {
		t.Helper()
		v, err := c.Get(ctx, key(k)).Int64()
		if err != nil {
			t.Errorf("%s: %v; want an integer", k, err)
		}
		return v / (place * place), v / place % place, v % place, c.PTTL(ctx, key(k)).Val()
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	w := now.UnixMicro() / time.Hour.Microseconds()
	tag := w%tags + 1
	value := func(tag, prev, cur int64) int64 { return (tag*place+prev)*place + cur }

	// Admitted, then denied at the limit: the counts stay and the TTL stays
	// the next window's end.
	if r, err := lim.AllowN(ctx, "a", 2); err != nil || !r.Allowed || r.Remaining != 8 {
		t.Errorf("AllowN 2: %+v, %v; want admitted with 8 left", r, err)
	}
	gt, gp, gc, ttl := get("a")
	if gt != tag || gp != 0 || gc != 2 || ttl <= time.Hour || ttl > 2*time.Hour {
		t.Errorf("after 2 events Redis holds tag %d, counts %d and %d, TTL %v; want tag %d, counts 0 and 2, a TTL to the next window's end", gt, gp, gc, ttl, tag)
	}
	if r, err := lim.AllowN(ctx, "a", 8); err != nil || !r.Allowed || r.Remaining != 0 {
		t.Errorf("AllowN 8: %+v, %v; want admitted with 0 left", r, err)
	}
	if r, err := lim.Allow(ctx, "a"); err != nil || r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 {
		t.Errorf("Allow at the limit: %+v, %v; want denied", r, err)
	}
	if gt, gp, gc, ttl2 := get("a"); gt != tag || gp != 0 || gc != 10 || ttl2 <= 0 || ttl2 > ttl {
		t.Errorf("after a denial Redis holds tag %d, counts %d and %d, TTL %v; want counts 0 and 10 (the denied event given back), the TTL kept", gt, gp, gc, ttl2)
	}

	// The previous window's value, with a TTL of 3h: its count of 3
	// becomes the previous count, and the TTL is set anew (2h at most).
	if err := c.Set(ctx, key("b"), value((w-1)%tags+1, 9, 3), 3*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := lim.Allow(ctx, "b"); err != nil || !r.Allowed {
		t.Errorf("Allow over the previous window's 3: %+v, %v; want admitted", r, err)
	}
	if gt, gp, gc, ttl := get("b"); gt != tag || gp != 3 || gc != 1 || ttl <= time.Hour || ttl > 2*time.Hour {
		t.Errorf("Redis holds tag %d, counts %d and %d, TTL %v; want tag %d, counts 3 and 1, a TTL to the next window's end", gt, gp, gc, ttl, tag)
	}
	// A previous window of 10: 10 more events are never admissible in this
	// window, and the value and its TTL are left as they were.
	full := value((w-1)%tags+1, 0, 10)
	if err := c.Set(ctx, key("c"), full, 3*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := lim.AllowN(ctx, "c", 10); err != nil || r.Allowed {
		t.Errorf("AllowN 10 over the previous window's 10: %+v, %v; want denied", r, err)
	}
	if v, err := c.Get(ctx, key("c")).Int64(); err != nil || v != full || c.PTTL(ctx, key("c")).Val() <= 2*time.Hour {
		t.Errorf("after the denial Redis holds %d (%v) with TTL %v; want %d with its TTL of 3h", v, err, c.PTTL(ctx, key("c")).Val(), full)
	}

	// The string form of this window, with a TTL of 10 minutes: read, and
	// rewritten as an integer with that TTL kept.
	if err := c.Set(ctx, key("d"), fmt.Sprintf("%d:2:4", w), 10*time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := lim.Allow(ctx, "d"); err != nil || !r.Allowed {
		t.Errorf("Allow over the string form's counts of 2 and 4: %+v, %v; want admitted", r, err)
	}
	if gt, gp, gc, ttl := get("d"); gt != tag || gp != 2 || gc != 5 || ttl <= 0 || ttl > 10*time.Minute {
		t.Errorf("Redis holds tag %d, counts %d and %d, TTL %v; want tag %d, counts 2 and 5, the TTL of 10m kept", gt, gp, gc, ttl, tag)
	}

	// The string form stays for a rate of 2^20 or more.
	big := newOn(t, c, SlidingWindowCounter, PerHour(1<<20), WithPrefix(prefix))
	if r, err := big.AllowN(ctx, "e", 3); err != nil || !r.Allowed {
		t.Errorf("rate 2^20: AllowN 3: %+v, %v", r, err)
	}
	if v, err := c.Get(ctx, big.keys("e")[0]).Result(); err != nil || !strings.HasSuffix(v, ":0:3") {
		t.Errorf("rate 2^20: Redis holds %q (%v); want \"<window>:0:3\"", v, err)
	}
}

// A window algorithm's integer value whose tag reads as a window ahead
// (Redis's clock stepped back) is taken for one only when the key's TTL
// reaches that window, as such a value is written with: without a TTL (a
// PERSIST from outside, the tag come round again) it is a window gone by,
// and the key starts afresh with a TTL. Values out of the integer form's
// range start afresh too. On a real Redis, for FixedWindow and
// SlidingWindowCounter at 10 per hour.
func TestWindowValuesAheadNeedTheirTTL(t *testing.T) {
	c := redistest.Client(t)
	avoidWindowEdge(t, c, time.Hour)
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	w := now.UnixMicro() / time.Hour.Microseconds()
	const place, tags = 32, 1<<43 - 1
	for _, tc := range []struct {
		alg  Algorithm
		full func(w int64) int64 // the value of window w with 10 events
	}{
		{FixedWindow, func(w int64) int64 { return (w%(1<<20)+1)<<32 + 10 }},
		{SlidingWindowCounter, func(w int64) int64 { return ((w%tags+1)*place+0)*place + 10 }},
	} {
		lim := newOn(t, c, tc.alg, PerHour(10), WithPrefix(fmt.Sprintf("ahead-%d", time.Now().UnixNano())))
		key := func(k string) string { return lim.keys(k)[0] }
		ahead := tc.full(w + 5)
		for _, s := range []struct {
			k     string
			value interface{}
			ttl   time.Duration // 0: none
			fresh bool
		}{
			{"no-ttl", ahead, 0, true},
			{"short-ttl", ahead, time.Hour, true},
			{"ttl", ahead, 7 * time.Hour, false},
			{"negative", "-5", time.Hour, true},
			{"past-2^53", "9007199254740993", time.Hour, true},
			{"past-int64", "99999999999999999999", time.Hour, true},
		} {
			if err := c.Set(ctx, key(s.k), s.value, s.ttl).Err(); err != nil {
				t.Fatal(err)
			}
			r, err := lim.Allow(ctx, s.k)
			ttl := c.PTTL(ctx, key(s.k)).Val()
			switch {
			case err != nil:
				t.Errorf("%s %s: %v", tc.alg, s.k, err)
			case s.fresh && (!r.Allowed || r.Remaining != 9 || ttl <= 0 || ttl > 2*time.Hour):
				t.Errorf("%s %s: %+v, TTL %v; want a fresh window: admitted, 9 left, a TTL within two hours", tc.alg, s.k, r, ttl)
			case !s.fresh && (r.Allowed || r.RetryAfter < 4*time.Hour):
				t.Errorf("%s %s: %+v; want denied until the full window 5 hours ahead has passed", tc.alg, s.k, r)
			}
		}
	}
}
