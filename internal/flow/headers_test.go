package flow

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// items parses a RateLimit or RateLimit-Policy value as this package
// writes it: name → parameter → integer.
func items(t *testing.T, v string) map[string]map[string]int64 {
	t.Helper()
	out := map[string]map[string]int64{}
	for _, item := range strings.Split(v, ", ") {
		parts := strings.Split(item, ";")
		name, err := strconv.Unquote(parts[0])
		if err != nil {
			t.Fatalf("item %q of %q: name: %v", item, v, err)
		}
		if _, dup := out[name]; dup {
			t.Errorf("%q: name %q twice", v, name)
		}
		params := map[string]int64{}
		for _, p := range parts[1:] {
			k, n, _ := strings.Cut(p, "=")
			params[k], err = strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("item %q of %q: %v", item, v, err)
			}
		}
		out[name] = params
	}
	return out
}

// The quota a rule advertises bounds what RateLimit says remains, for
// every algorithm and for limits whose Burst differs from their Rate: a
// bucket with a Burst above its Rate advertises q=Burst over the time it
// takes to refill, so a client never reads r=49 of q=10.
func TestRemainingWithinQuota(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := "headers-quota-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	type limit struct {
		l    core.Limit
		q, w int64
	}
	windows := []limit{
		{core.PerSecond(10), 10, 1},
		{core.Limit{Rate: 5, Period: 500 * time.Millisecond}, 5, 1},
		{core.Limit{Rate: 7, Period: 1500 * time.Millisecond, Burst: 7}, 7, 2},
		{core.PerHour(3), 3, 3600},
	}
	buckets := append([]limit{
		{core.Limit{Rate: 10, Period: time.Second, Burst: 50}, 50, 5},
		{core.Limit{Rate: 7, Period: 1500 * time.Millisecond, Burst: 3}, 7, 2}, // Burst < Rate: q stays the Rate
		{core.Limit{Rate: 100, Period: time.Minute, Burst: 1}, 100, 60},
		{core.Limit{Rate: 100, Period: time.Minute, Burst: 15}, 100, 60},
		{core.Limit{Rate: 3, Period: time.Hour, Burst: 4}, 4, 4800},
	}, windows...)
	for _, alg := range []core.Algorithm{core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter, core.LeakyBucket, core.TokenBucket, core.GCRA} {
		limits := buckets
		switch alg {
		case core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter:
			limits = windows
		}
		for i, c := range limits {
			lim, err := core.New(rdb, alg, c.l, core.WithPrefix(prefix), core.WithTimeout(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			f := New(lim, []Option{WithMaxHold(time.Hour)})
			f.cfg.Sleep = func(context.Context, time.Duration) error { return nil }
			key := string(alg) + "-" + strconv.Itoa(i)
			for step := range c.q + 2 {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest("GET", "/", nil)
				req.RemoteAddr = "192.0.2.1:1"
				f.cfg.Key = func(*http.Request, any) (string, error) { return key, nil }
				f.Admit(rec, req, nil)
				policy := items(t, rec.Header().Get("RateLimit-Policy"))[string(alg)]
				state := items(t, rec.Header().Get("RateLimit"))[string(alg)]
				if policy["q"] != c.q || policy["w"] != c.w {
					t.Errorf("%s %v: RateLimit-Policy %q, want q=%d;w=%d", alg, c.l, rec.Header().Get("RateLimit-Policy"), c.q, c.w)
					break
				}
				if state["r"] > policy["q"] {
					t.Errorf("%s %v, request %d: RateLimit %q says more remains than the quota %q", alg, c.l, step+1,
						rec.Header().Get("RateLimit"), rec.Header().Get("RateLimit-Policy"))
					break
				}
			}
			lim.Close()
		}
	}
}

// Nested middlewares (a global limit, then a route's) send every policy
// that applies: the inner one adds its items to the outer's fields, under
// a distinct name when the names clash. Retry-After is the largest;
// legacy X-RateLimit-* are the most restrictive rule's.
func TestNestedHeaders(t *testing.T) {
	outer := New(miniLimiter(t, core.GCRA, core.PerMinute(3)), []Option{WithHeaders(HeadersBoth)})
	inner := New(miniLimiter(t, core.GCRA, core.PerMinute(1)), []Option{WithHeaders(HeadersBoth)})
	serve := nested(outer, inner)
	rec := serve()
	if got, want := rec.Header().Get("RateLimit-Policy"), `"gcra";q=3;w=60, "gcra-2";q=1;w=60`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got, want := rec.Header().Get("RateLimit"), `"gcra";r=2;t=20, "gcra-2";r=0;t=60`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	if got := rec.Header().Get("X-RateLimit-Limit") + "/" + rec.Header().Get("X-RateLimit-Remaining"); got != "1/0" {
		t.Errorf("X-RateLimit-Limit/Remaining = %s, want the inner, most restrictive 1/0", got)
	}
	rec = serve() // the inner denies
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" {
		t.Errorf("inner denial: status %d, Retry-After %q; want 429, 60", rec.Code, rec.Header().Get("Retry-After"))
	}
	if got, want := rec.Header().Get("RateLimit"), `"gcra";r=1;t=40, "gcra-2";r=0;t=60`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	if n := len(rec.Header().Values("RateLimit")); n != 1 {
		t.Errorf("%d RateLimit fields, want one list", n)
	}
}

// nested returns a function serving one request through outer, then, when
// it admits, inner, as stacked middlewares do.
func nested(outer, inner *Flow) func() *httptest.ResponseRecorder {
	return func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		if outer.Admit(rec, req, nil) {
			inner.Admit(rec, req, nil)
		}
		return rec
	}
}

// The problem details say "1 second", "2 seconds".
func TestProblemDetailGrammar(t *testing.T) {
	for _, c := range []struct {
		retry time.Duration
		want  string
	}{
		{time.Second, "retry in 1 second."},
		{1500 * time.Millisecond, "retry in 2 seconds."},
		{time.Minute, "retry in 60 seconds."},
	} {
		rec := httptest.NewRecorder()
		DenyProblem(rec, nil, core.Result{RetryAfter: c.retry, Rule: "r"})
		var p struct{ Detail string }
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(p.Detail, c.want) {
			t.Errorf("RetryAfter %s: detail %q, want it to end %q", c.retry, p.Detail, c.want)
		}
	}
}

// Names taken by an outer middleware, escaped ones included, are not
// reused: the added rules get the first free suffix.
func TestAddItemsDistinctNames(t *testing.T) {
	h := http.Header{}
	h.Set("RateLimit-Policy", `"a\"b";q=1;w=1, "x";q=2;w=3, "x-2";q=1;w=1`)
	h.Set("RateLimit", `"a\"b";r=0;t=1, "x";r=1;t=2, "x-2";r=1;t=1`)
	rules := []core.RuleResult{rule(`a"b`, 5, time.Minute), rule("x", 5, time.Minute), rule("y", 5, time.Minute)}
	for i := range rules {
		rules[i].Remaining = 4
	}
	setHeaders(h, HeadersDraft, core.Result{Allowed: true, Rules: rules}, "", time.Now())
	want := `"a\"b";q=1;w=1, "x";q=2;w=3, "x-2";q=1;w=1, "a\"b-2";q=5;w=60, "x-3";q=5;w=60, "y";q=5;w=60`
	if got := h.Get("RateLimit-Policy"); got != want {
		t.Errorf("RateLimit-Policy = %s, want %s", got, want)
	}
	if got := items(t, h.Get("RateLimit")); len(got) != 6 || got["x-3"]["r"] != 4 {
		t.Errorf("RateLimit = %s", h.Get("RateLimit"))
	}
}

// A denial behind an outer middleware names, in its problem details, the
// rule as the headers name it: "gcra-2" when the outer one is "gcra".
func TestNestedProblemNamesTheRenamedRule(t *testing.T) {
	outer := New(miniLimiter(t, core.GCRA, core.PerMinute(3)), []Option(nil))
	inner := New(miniLimiter(t, core.GCRA, core.PerMinute(1)), []Option{WithProblemDetails()})
	var rec *httptest.ResponseRecorder
	for range 2 {
		rec = httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		if outer.Admit(rec, req, nil) {
			inner.Admit(rec, req, nil)
		}
	}
	var p struct {
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("status %d, body %q: %v", rec.Code, rec.Body, err)
	}
	if len(p.Violated) != 1 || p.Violated[0] != "gcra-2" {
		t.Errorf("violated-policies %q with RateLimit %q; want [gcra-2], the denying item", p.Violated, rec.Header().Get("RateLimit"))
	}
}

// Quota advertises Burst over its refill time only for a Burst above the
// Rate: a smaller Burst is reached at once, and q=Burst would understate
// the rate the bucket admits (10/s with Burst 1 is not 1 per second).
func TestQuota(t *testing.T) {
	for _, c := range []struct {
		limit core.Limit
		q, w  int64
	}{
		{core.PerSecond(10), 10, 1},
		{core.Limit{Rate: 10, Period: time.Second, Burst: 50}, 50, 5},
		{core.Limit{Rate: 10, Period: time.Second, Burst: 1}, 10, 1},
		{core.Limit{Rate: 5, Period: 500 * time.Millisecond}, 5, 1},
		{core.Limit{Rate: 3, Period: time.Hour, Burst: 4}, 4, 4800},
	} {
		if q, w := Quota(c.limit); q != c.q || w != c.w {
			t.Errorf("Quota(%v) = q=%d;w=%d, want q=%d;w=%d", c.limit, q, w, c.q, c.w)
		}
	}
}

// The legacy headers of a lone middleware cost two allocations whatever
// their numbers: one string holding the three values and one array for
// them. (Parsing the absent fields of an outer middleware cost one each,
// strconv's error for "", and canonicalising each name one more.) Limits
// and counts of three digits or more once cost one more each.
func TestLegacyHeadersAllocations(t *testing.T) {
	for _, limit := range []core.Limit{core.PerSecond(10), core.PerHour(1 << 30)} {
		rr := rule("r", limit.Rate, limit.Period)
		rr.Remaining, rr.ResetAfter = limit.Rate-1, limit.Period
		res := core.Result{Allowed: true, Limit: limit, Remaining: rr.Remaining, Rule: "r", Rules: []core.RuleResult{rr}}
		h := http.Header{}
		now := time.Now()
		parse := testing.AllocsPerRun(100, func() {
			clear(h)
			setHeaders(h, HeadersLegacy, res, "", now)
		})
		if parse > 2 {
			t.Errorf("%s: legacy headers: %.0f allocations, want at most 2 (one string for the three values and one array for them)", limit, parse)
		}
		want := http.Header{
			"X-Ratelimit-Limit":     {strconv.Itoa(limit.Rate)},
			"X-Ratelimit-Remaining": {strconv.Itoa(limit.Rate - 1)},
			"X-Ratelimit-Reset":     {strconv.FormatInt(ceilUnix(now.Add(limit.Period)), 10)},
		}
		if !reflect.DeepEqual(h, want) {
			t.Errorf("%s: legacy headers %v, want %v", limit, h, want)
		}
	}
}

// The draft headers of a lone middleware cost two allocations whatever the
// rule's name and numbers: the RateLimit value and one array for both
// values (RateLimit-Policy comes formatted from the flow's cache). The
// longest algorithm name, a large remaining count and a long reset once
// outgrew the formatting buffer and cost a third.
func TestDraftHeadersAllocations(t *testing.T) {
	for _, name := range []string{"gcra", string(core.SlidingWindowCounter), "a-policy-rule-named-at-length"} {
		rr := rule(name, 1<<30, 24*time.Hour)
		rr.Remaining, rr.ResetAfter = 1<<30-1, 23*time.Hour
		res := core.Result{Allowed: true, Limit: rr.Limit, Remaining: rr.Remaining, Rule: name, Rules: []core.RuleResult{rr}}
		policy := Policy(res.Rules)
		h := http.Header{}
		n := testing.AllocsPerRun(100, func() {
			clear(h)
			setHeaders(h, HeadersDraft, res, policy, time.Time{})
		})
		if n > 2 {
			t.Errorf("%s: draft headers: %.0f allocations, want at most 2 (the RateLimit value and one array for both values); RateLimit: %s", name, n, h.Get(headerRateLimit))
		}
	}
}

// The longest Duration, which a reply past what a Duration holds reads as
// (see core's micros), is a number of whole seconds like any other: adding
// a second less a nanosecond to round it up wrapped round to a negative
// Retry-After and t=.
func TestCeilSecondsOfTheLongestDuration(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		math.MaxInt64:   math.MaxInt64/int64(time.Second) + 1,
		time.Second:     1,
		time.Second + 1: 2,
		1:               1,
		0:               0,
		-time.Second:    0,
	} {
		if got := ceilSeconds(d); got != want {
			t.Errorf("ceilSeconds(%d) = %d; want %d", d, got, want)
		}
	}
}

// minuteAndHour returns a policy, on the test Redis and keys of its own,
// of 6 a minute ("minute") and 8 an hour ("hour"), both GCRA.
func minuteAndHour(t *testing.T) *core.Limiter {
	rules := []core.Rule{
		{Name: "minute", Algorithm: core.GCRA, Limit: core.PerMinute(6)},
		{Name: "hour", Algorithm: core.GCRA, Limit: core.PerHour(8)},
	}
	lim, err := core.NewPolicy(redistest.Client(t), rules, core.WithTimeout(10*time.Second),
		core.WithPrefix("minute-hour-"+strconv.FormatInt(time.Now().UnixNano(), 36)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

// The legacy fields describe one rule: the deciding one. Denied a cost of
// 5 by two rules, one with 1 left whose wait is short (6 a minute) and one
// with 3 left whose wait is long (8 an hour), the client reads the hourly
// rule's limit, remaining and reset, which Retry-After waits for: not its
// limit beside the other rule's remaining.
func TestLegacyHeadersDescribeTheDecidingRule(t *testing.T) {
	f := New(minuteAndHour(t), []Option{WithHeaders(HeadersLegacy), WithCost(func(*http.Request) int { return 5 })})
	admit := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "192.0.2.1:1"
		f.Admit(rec, req, nil)
		return rec
	}
	admit()
	rec := admit()
	h := rec.Header()
	reset, _ := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	wait := time.Until(time.Unix(reset, 0))
	if rec.Code != http.StatusTooManyRequests || h.Get("X-RateLimit-Limit") != "8" || h.Get("X-RateLimit-Remaining") != "3" || wait < 30*time.Minute {
		t.Errorf("status %d, X-RateLimit-Limit %q, -Remaining %q, -Reset in %v; want 429 and the hourly rule's 8, 3 and about 37m",
			rec.Code, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), wait)
	}
}

// A denial's legacy fields are its deciding rule's, over an outer
// middleware's that admitted with fewer remaining than the denying rule
// has (a cost above 1): the client waits for the rule Retry-After names.
func TestNestedLegacyHeadersOfADenial(t *testing.T) {
	cost := WithCost(func(*http.Request) int { return 5 })
	outer := New(miniLimiter(t, core.GCRA, core.PerMinute(12)), []Option{WithHeaders(HeadersLegacy), cost})
	inner := New(minuteAndHour(t), []Option{WithHeaders(HeadersLegacy), cost})
	serve := nested(outer, inner)
	serve()
	rec := serve() // the outer admits, 2 left; the inner denies: the minute rule has 1 left, the hour 3
	h := rec.Header()
	reset, _ := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if rec.Code != http.StatusTooManyRequests || h.Get("X-RateLimit-Limit") != "8" || time.Until(time.Unix(reset, 0)) < 30*time.Minute {
		t.Errorf("status %d, X-RateLimit-Limit %q, -Remaining %q, -Reset in %v; want 429 and the hourly rule's",
			rec.Code, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), time.Until(time.Unix(reset, 0)))
	}
}
