package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A string written at a window rule's key from outside is no state, as for
// the meters (see TestMeterStateForms): the request is decided as on a
// missing key, and the value is replaced with the limiter's own, with a
// TTL. That includes the strings Lua reads as numbers that are not whole
// (NaN, infinities, fractions, a fraction past a window's tag). Alone, and
// in a policy beside a GCRA rule, which then consumes exactly what was
// admitted: a rule that cannot read its key must not make the call fail
// after another rule has consumed.
func TestWindowRulesOverValuesFromOutside(t *testing.T) {
	c := redistest.Client(t)
	avoidWindowEdge(t, c, time.Hour)
	ctx := context.Background()
	values := []string{"nan", "-nan", "inf", "-inf", "1e300", "5.5", "-12", "0x10", "garbage",
		fmt.Sprint(1<<32) + ".5", fmt.Sprint(1<<52) + ".5", "12:nan", "nan:nan:nan"}
	// A FixedWindow count of this hour's window with a fraction: its tag
	// (see lua/fixed_window.lua) is right, its count is not whole.
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	w := now.UnixMicro() / time.Hour.Microseconds()
	values = append(values, fmt.Sprintf("%d.5", (w%(1<<20)+1)<<32+2))
	// A meter's TAT a minute ahead, with a fraction.
	values = append(values, fmt.Sprintf("%d.5", now.Add(time.Minute).UnixMicro()))
	for _, alg := range []Algorithm{FixedWindow, SlidingWindowCounter, GCRA, TokenBucket, LeakyBucket} {
		for _, withGCRA := range []bool{false, true} {
			rules := []Rule{{Name: "w", Algorithm: alg, Limit: PerHour(10)}}
			if withGCRA {
				rules = append(rules, Rule{Name: "g", Algorithm: GCRA, Limit: PerHour(100)})
			}
			lim, err := NewPolicy(c, rules, WithPrefix(fmt.Sprintf("outside-%d", time.Now().UnixNano())))
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range values {
				key := fmt.Sprint("k", i)
				wkey := lim.keys(key)[0]
				if err := c.Set(ctx, wkey, v, 0).Err(); err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("%s (with GCRA: %v) over %q", alg, withGCRA, v)
				r, err := lim.AllowN(ctx, key, 3)
				if err != nil || !r.Allowed || r.Rules[0].Remaining != 7 {
					t.Errorf("%s: AllowN 3: %+v, %v; want admitted with 7 left", what, r, err)
					continue
				}
				if ttl := c.PTTL(ctx, wkey).Val(); ttl <= 0 || ttl > 2*time.Hour {
					t.Errorf("%s: the key's TTL is %v; want one of at most two hours", what, ttl)
				}
				p, err := lim.Peek(ctx, key)
				if err != nil || p.Rules[0].Remaining != 7 {
					t.Errorf("%s: Peek: %+v, %v; want 7 left", what, p, err)
				}
				if withGCRA && (err != nil || p.Rules[1].Remaining != 97) {
					t.Errorf("%s: Peek: %+v, %v; want GCRA's 97 left, 3 consumed", what, p, err)
				}
			}
		}
	}
}

// A value of a rule's own form that lies ahead of Redis's clock is read as
// state only when the key's TTL reaches as far, as it does for every value
// the script writes: Redis's clock stepped back behind it. One without a
// TTL (written from outside, or left by PERSIST) was never written so: it
// is no state, the request is decided as on a missing key, and the key
// gets a TTL. (It used to be read as state: a TAT of 2^52-1 ticks denied
// the key for over 750,000 hours, and since a denial writes nothing and an
// admission kept the missing TTL, the key never healed; the string forms of
// the windows and the log's members did the same.) With a TTL that reaches
// it, the same value still denies, with the exact wait.
func TestStateAheadWithoutItsTTLIsNoState(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	hourAhead := now.Add(time.Hour).UnixMicro()
	cases := []struct {
		name  string
		alg   Algorithm
		limit Limit
		set   func(key string) error // at an hour ahead, or far beyond (no TTL reaches it)
	}{
		{"GCRA, a TAT at 2^52-1", GCRA, PerHour(10), func(k string) error {
			return c.Set(ctx, k, fmt.Sprint(int64(1)<<52-1), 0).Err()
		}},
		{"TokenBucket, a TAT an hour ahead", TokenBucket, PerSecond(10), func(k string) error {
			return c.Set(ctx, k, fmt.Sprint(hourAhead), 0).Err()
		}},
		{"LeakyBucket, a TAT with a remainder an hour ahead", LeakyBucket, PerSecond(3), func(k string) error {
			return c.Set(ctx, k, fmt.Sprint(hourAhead, ":1"), 0).Err()
		}},
		{"FixedWindow, the string form's window far ahead", FixedWindow, Limit{Rate: 10, Period: 100 * time.Millisecond}, func(k string) error {
			return c.Set(ctx, k, "99999999999:10", 0).Err()
		}},
		{"SlidingWindowCounter, the string form's window far ahead", SlidingWindowCounter, PerSecond(1 << 20), func(k string) error {
			return c.Set(ctx, k, fmt.Sprintf("99999999999:0:%d", 1<<20), 0).Err()
		}},
		{"SlidingWindowLog, a member an hour ahead", SlidingWindowLog, PerSecond(10), func(k string) error {
			return c.ZAdd(ctx, k, redis.Z{Score: float64(hourAhead), Member: "5000000000000010"}).Err()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, ttl := range []time.Duration{0, 3 * time.Hour} {
				if ttl != 0 && !strings.Contains(tc.name, "an hour ahead") {
					continue // far ahead: no TTL reaches it
				}
				lim, err := New(c, tc.alg, tc.limit, WithPrefix(fmt.Sprintf("ahead-%d", time.Now().UnixNano())))
				if err != nil {
					t.Fatal(err)
				}
				key := lim.keys("k")[0]
				if err := tc.set(key); err != nil {
					t.Fatal(err)
				}
				if ttl != 0 {
					c.PExpire(ctx, key, ttl)
				}
				r, err := lim.Allow(ctx, "k")
				lim.Close()
				if err != nil {
					t.Fatal(err)
				}
				left := c.PTTL(ctx, key).Val()
				if ttl == 0 {
					if !r.Allowed || r.Remaining != tc.limit.Rate-1 {
						t.Errorf("no TTL: %+v; want admitted as on a missing key", r)
					}
					// -1: no TTL. (A 100ms window's key may be gone, -2,
					// or have under a millisecond left, 0, by now.)
					if left == -1 || left > 2*time.Hour {
						t.Errorf("no TTL: the key's TTL is %v after an admission; want one of at most two hours", left)
					}
					continue
				}
				if r.Allowed || r.RetryAfter < 59*time.Minute || r.RetryAfter > 61*time.Minute {
					t.Errorf("with a TTL reaching it: %+v; want denied for about an hour (the clock stepped back)", r)
				}
			}
		})
	}
}

// A duration in a script's reply converts to a time.Duration without
// wrapping round: the longest a meter can say (a TAT at 2^52-1 ticks of a
// millisecond, with a TTL that long) is more nanoseconds than an int64
// holds, and Redis answers a Lua number past int64 with its least value.
// Both mean "longer than a Duration says": the longest Duration. (Wrapped,
// such a denial said RetryAfter 0, and Wait spun against Redis.)
func TestRepliedDurationsSaturate(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	limit := Limit{Rate: 100003, Period: 24 * time.Hour} // counted in ticks of a millisecond
	lim, err := New(c, GCRA, limit, WithPrefix(fmt.Sprintf("saturate-%d", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if tick := lim.rules[0].tick; tick != 1000 {
		t.Fatalf("%s is counted in ticks of %dµs; the test wants a millisecond", limit, tick)
	}
	key := lim.keys("k")[0]
	if err := c.Set(ctx, key, fmt.Sprint(int64(1)<<52-1), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "PEXPIRE", key, int64(1)<<62).Err(); err != nil { // 2^62 ms
		t.Fatal(err)
	}
	r, err := lim.Allow(ctx, "k")
	if err != nil || r.Allowed || r.RetryAfter != time.Duration(math.MaxInt64) || r.ResetAfter != time.Duration(math.MaxInt64) {
		t.Errorf("Allow: %+v, %v; want denied, RetryAfter and ResetAfter the longest Duration", r, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := lim.Wait(wctx, "k"); !errors.Is(err, context.DeadlineExceeded) || wctx.Err() != nil {
		t.Errorf("Wait: %v (its context: %v); want at once an error wrapping context.DeadlineExceeded", err, wctx.Err())
	}
}

// A reply that says less than zero, which the script never sends but
// Redis makes of a Lua number past int64 (or NaN), reads as the longest
// Duration too.
func TestNegativeReplyDurationsSaturate(t *testing.T) {
	for _, v := range []int64{math.MinInt64, -1, math.MaxInt64, math.MaxInt64 / 1000 * 2} {
		if d := micros(v); d != time.Duration(math.MaxInt64) {
			t.Errorf("micros(%d) = %v; want the longest Duration", v, d)
		}
	}
	if d := micros(1500); d != 1500*time.Microsecond {
		t.Errorf("micros(1500) = %v; want 1.5ms", d)
	}
}

// A SlidingWindowLog set holding a member whose name was never written
// here (not a whole number from 5×10^15 to below 9×10^15: "abc", "1",
// "-5", from outside) is no state, wherever the decision meets it: as the
// newest member, as the boundary, in the window a denial searches, or
// among the members renumbered once numbers reach 9×10^15. The request is
// decided as on an empty log, the set replaced, with a TTL; in a policy,
// the other rules consume exactly what was admitted. ("1" used to lift the
// limit for a Period while every admission read as a denial; "abc" failed
// every request with a Lua error, for good, and, met while renumbering,
// after the set was deleted and the policy's other rules had consumed.)
func TestSlidingLogOverMembersFromOutside(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	us := float64(now.UnixMicro())
	hour := float64(time.Hour.Microseconds())
	cases := []struct {
		name    string
		members []redis.Z
		rate    int
	}{
		{"a newest member below the offset", []redis.Z{{Score: us - 1000, Member: "1"}}, 5},
		{"a negative newest member", []redis.Z{{Score: us - 1000, Member: "-5"}}, 5},
		{"a newest member not a number", []redis.Z{{Score: us - 1000, Member: "abc"}}, 5},
		{"a boundary not a number", []redis.Z{{Score: us - 2*hour, Member: "abc"}, {Score: us - 1000, Member: "5000000000000002"}}, 5},
		{"a boundary above the newest", []redis.Z{{Score: us - 2*hour, Member: "8000000000000000"}, {Score: us - 1000, Member: "5000000000000002"}}, 5},
		{"a denial's search, one member not a number", []redis.Z{
			{Score: us - 3000, Member: "5000000000000001"}, {Score: us - 2000, Member: "abc"}, {Score: us - 1000, Member: "5000000000000007"}}, 5},
		{"renumbering, one member not a number", []redis.Z{
			{Score: us - 2*hour, Member: "8999999999999990"}, {Score: us - 2000, Member: "abc"}, {Score: us - 1000, Member: "8999999999999999"}}, 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := NewPolicy(c, []Rule{
				{Name: "g", Algorithm: GCRA, Limit: PerHour(1000)},
				{Name: "log", Algorithm: SlidingWindowLog, Limit: PerHour(tc.rate)},
			}, WithPrefix(fmt.Sprintf("logoutside-%d", time.Now().UnixNano())))
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			logKey := lim.keys("k")[1]
			if err := c.ZAdd(ctx, logKey, tc.members...).Err(); err != nil {
				t.Fatal(err)
			}
			admitted := 0
			for i := 0; i < tc.rate+2; i++ {
				r, err := lim.Allow(ctx, "k")
				if err != nil || r.Remaining < 0 || r.Rules[1].Remaining > tc.rate || !r.Allowed && r.RetryAfter <= 0 {
					t.Fatalf("Allow %d: %+v, %v; want a well-formed decision", i, r, err)
				}
				if i == 0 && (!r.Allowed || r.Rules[1].Remaining != tc.rate-1) {
					t.Errorf("Allow 0: %+v; want admitted as on an empty log, %d left", r, tc.rate-1)
				}
				if r.Allowed {
					admitted++
				}
			}
			if admitted != tc.rate {
				t.Errorf("%d admitted of %d Allows; want the log's %d", admitted, tc.rate+2, tc.rate)
			}
			p, err := lim.Peek(ctx, "k")
			if err != nil || p.Rules[0].Remaining != 1000-admitted {
				t.Errorf("Peek: %+v, %v; want GCRA to have consumed exactly the %d admitted", p, err, admitted)
			}
			if ttl := c.PTTL(ctx, logKey).Val(); ttl <= 0 || ttl > 2*time.Hour {
				t.Errorf("the log's TTL is %v; want one of at most two periods", ttl)
			}
		})
	}
}
