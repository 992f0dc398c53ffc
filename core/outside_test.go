package core

import (
	"context"
	"fmt"
	"testing"
	"time"

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
