package core

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A request whose cost exceeds its rule's rate never reaches the script
// through the API (ErrCostExceedsLimit), but the window scripts still deny
// it and write nothing, in the integer form (where a window's first request
// is otherwise taken with INCRBY and kept) as in the string form.
func TestWindowsDenyCostAboveTheRate(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	loadScript(t, c)
	for _, tc := range []struct {
		alg Algorithm
		l   Limit
	}{
		{FixedWindow, PerHour(10)},
		{FixedWindow, Limit{Rate: 10, Period: 100 * time.Millisecond}},
		{SlidingWindowCounter, PerHour(10)},
	} {
		l := tc.l
		lim := newOn(t, c, tc.alg, l, WithPrefix(fmt.Sprintf("over-%d", time.Now().UnixNano())))
		g := &scriptGroup{calls: []*call{{keys: lim.appendKeys(nil, storedKey("k")), args: appendArgs(nil, true, 11)}}}
		g.build(ctx, lim.batch.script, lim.batch.ruleArgs)
		reply, err := c.Do(ctx, g.args...).Int64Slice()
		if err != nil {
			t.Fatalf("%s %v: %v", tc.alg, l, err)
		}
		if res, _, err := parseReply(reply, 1, nil); err != nil || res[0] != 0 {
			t.Errorf("%s %v: 11 events answered %v, %v; want denied", tc.alg, l, res, err)
		}
		if n, err := c.Exists(ctx, lim.keys("k")...).Result(); err != nil || n != 0 {
			t.Errorf("%s %v: %d keys written (%v) by a denial", tc.alg, l, n, err)
		}
	}
}
