package flow

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

func rule(name string, rate int, period time.Duration) core.RuleResult {
	return core.RuleResult{Name: name, Limit: core.Limit{Rate: rate, Period: period, Burst: rate}, Allowed: true}
}

func TestPolicy(t *testing.T) {
	for _, c := range []struct {
		name  string
		rules []core.RuleResult
		want  string
	}{
		{"one", []core.RuleResult{rule("gcra", 100, time.Minute)}, `"gcra";q=100;w=60`},
		{"two", []core.RuleResult{rule("a", 2, time.Second), rule("b", 100, 24*time.Hour)}, `"a";q=2;w=1, "b";q=100;w=86400`},
		{"sub-second", []core.RuleResult{rule("s", 5, 500*time.Millisecond)}, `"s";q=5;w=1`},
		{"rounded up", []core.RuleResult{rule("s", 5, 1500*time.Millisecond)}, `"s";q=5;w=2`},
		{"escaped", []core.RuleResult{rule(`a"b\c`, 1, time.Second)}, `"a\"b\\c";q=1;w=1`},
		{"not printable", []core.RuleResult{rule("tab\there é", 1, time.Second)}, `"tab_here __";q=1;w=1`},
	} {
		if got := Policy(c.rules); got != c.want {
			t.Errorf("%s: Policy = %s, want %s", c.name, got, c.want)
		}
	}
}

func TestRateLimit(t *testing.T) {
	allowed := rule("a", 10, time.Minute)
	allowed.Remaining, allowed.ResetAfter = 7, 17*time.Second+time.Millisecond
	denied := rule("d", 2, time.Second)
	denied.Allowed, denied.Remaining, denied.RetryAfter, denied.ResetAfter = false, 0, 300*time.Millisecond, time.Second
	fresh := rule("f", 5, time.Hour)
	fresh.Remaining = 5
	negative := rule("n", 1, time.Second)
	negative.Remaining = -3
	got := RateLimit([]core.RuleResult{allowed, denied, fresh, negative})
	if want := `"a";r=7;t=18, "d";r=0;t=1, "f";r=5;t=0, "n";r=0;t=0`; got != want {
		t.Errorf("RateLimit = %s, want %s", got, want)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	denied := func(d time.Duration) core.RuleResult {
		rr := rule("x", 1, time.Second)
		rr.Allowed, rr.RetryAfter = false, d
		return rr
	}
	for _, c := range []struct {
		res  core.Result
		want int64
	}{
		{core.Result{}, 1},
		{core.Result{RetryAfter: time.Nanosecond}, 1},
		{core.Result{RetryAfter: time.Second}, 1},
		{core.Result{RetryAfter: time.Second + time.Microsecond}, 2},
		{core.Result{RetryAfter: 20 * time.Second}, 20},
		// never earlier than the t of a rule that denies
		{core.Result{RetryAfter: 2 * time.Second, Rules: []core.RuleResult{denied(2500 * time.Millisecond)}}, 3},
	} {
		if got := RetryAfterSeconds(c.res); got != c.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", c.res.RetryAfter, got, c.want)
		}
	}
}

func TestLegacyHeaders(t *testing.T) {
	now := time.Unix(1_700_000_000, 250_000_000)
	rr := rule("a", 10, time.Minute)
	rr.Remaining, rr.ResetAfter = 4, 29*time.Second
	res := core.Result{Allowed: true, Limit: rr.Limit, Rule: "a", Remaining: 4, ResetAfter: time.Hour, Rules: []core.RuleResult{rr}}
	h := http.Header{}
	setHeaders(h, HeadersLegacy, res, "", now)
	// reset: now + the deciding rule's 29s = ...029.25, rounded up
	for k, want := range map[string]string{
		"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "4", "X-RateLimit-Reset": "1700000030",
		"RateLimit": "", "RateLimit-Policy": "",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

func TestOverDelay(t *testing.T) {
	leaky := rule("leaky", 60, time.Minute) // drains one per second
	leaky.Delay = 3 * time.Second
	leaky.ResetAfter = 4 * time.Second // the request's own place drains after its delay
	other := rule("other", 100, time.Hour)
	res := core.Result{Allowed: true, Rule: "other", Delay: 3 * time.Second, Rules: []core.RuleResult{other, leaky}}
	got := overDelay(res, time.Second)
	if got.Allowed || got.Delay != 0 || got.Rule != "leaky" || got.RetryAfter != 3*time.Second {
		t.Errorf("overDelay = %+v, want denied by leaky, RetryAfter 3s (the 4s queue, its place included, less the 1s bound)", got)
	}
	if !got.Rules[0].Allowed || got.Rules[1].Allowed {
		t.Errorf("rules %+v: only leaky should deny", got.Rules)
	}
	if !res.Rules[1].Allowed {
		t.Error("overDelay changed its argument's rules")
	}
	if v := Violated(got); len(v) != 1 || v[0] != "leaky" {
		t.Errorf("Violated = %v", v)
	}
}

func TestUserKey(t *testing.T) {
	for _, c := range []struct {
		v       any
		want    string
		wantErr error
	}{
		{"alice", "user:alice", nil},
		{42, "user:42", nil},
		{uint64(7), "user:7", nil},
		{stringer("s-1"), "user:s-1", nil},
		{(*ptrStringer)(nil), "", keyfunc.ErrNoKey},
		{nil, "", keyfunc.ErrNoKey},
		{"", "", keyfunc.ErrNoKey},
		{3.5, "", nil},
	} {
		got, err := UserKey("user", c.v)
		if got != c.want || (c.wantErr != nil && !errors.Is(err, c.wantErr)) || (c.want == "") != (err != nil) {
			t.Errorf("UserKey(%#v) = %q, %v; want %q, %v", c.v, got, err, c.want, c.wantErr)
		}
	}
}

type stringer string

func (s stringer) String() string { return string(s) }

type ptrStringer struct{ s string }

func (p *ptrStringer) String() string { return p.s }

func TestContextRouteKey(t *testing.T) {
	r := httptest.NewRequest("GET", "/users/7", nil)
	r.Pattern = "untouched"
	key, err := ContextRouteKey(nil)(r, "/users/:id")
	if key != "route:GET /users/:id" || err != nil {
		t.Errorf("route key = %q, %v", key, err)
	}
	key, _ = ContextRouteKey([]keyfunc.Func{keyfunc.RemoteIP()})(r, "/users/:id")
	if key != "join:route:GET /users/:id|ip:192.0.2.1" {
		t.Errorf("joined route key = %q", key)
	}
	if r.Pattern != "untouched" {
		t.Errorf("the request's Pattern changed to %q", r.Pattern)
	}
}

// TestNewNeverPanics: New takes any options, nil ones included.
// A route key's method is one of ten, and requests that match no route
// share one key: a client cannot make up methods for fresh budgets.
func TestRouteMethods(t *testing.T) {
	for _, c := range []struct{ method, pattern, want string }{
		{"GET", "/users/:id", "GET /users/:id"},
		{"PATCH", "/users/:id", "PATCH /users/:id"},
		{"OPTIONS", "/x", "OPTIONS /x"},
		{"XYZ1", "/x", "OTHER /x"},
		{"get", "/x", "OTHER /x"}, // methods are case-sensitive
		{"GET", "", keyfunc.NoRoute},
		{"XYZ1", "", keyfunc.NoRoute},
	} {
		if got := Route(c.method, c.pattern); got != c.want {
			t.Errorf("Route(%q, %q) = %q; want %q", c.method, c.pattern, got, c.want)
		}
	}
	r := httptest.NewRequest("XYZ1", "/nowhere", nil)
	if key, err := ContextRouteKey(nil)(r, ""); key != "route:(no route)" || err != nil {
		t.Errorf("unmatched request: %q, %v", key, err)
	}
}

// New takes nil and out-of-range options without panicking; WithTimeout(-1)
// means no bound of the limiter's own, as core.WithTimeout(-1) does.
func TestNewNeverPanics(t *testing.T) {
	f := New[Option](nil, []Option{nil, WithKey(nil), WithDenyHandler(nil), WithErrorHandler(nil),
		WithContextKey(nil), WithTimeout(-1), WithMaxHold(-1), WithCost(nil), WithSkip(nil)})
	if f.cfg.Timeout != -1 || f.cfg.MaxHold != 0 || f.cfg.Key == nil || f.cfg.Deny == nil || f.cfg.OnError == nil {
		t.Errorf("config %+v", f.cfg)
	}
	rec := httptest.NewRecorder()
	var reported error
	f.cfg.OnError = func(_ *http.Request, err error) { reported = err }
	if !f.Admit(rec, httptest.NewRequest("GET", "/", nil), nil) || !errors.Is(reported, ErrNoLimiter) {
		t.Errorf("no limiter, fail open: admitted=false or error %v", reported)
	}
}

func FuzzAppendName(f *testing.F) {
	for _, s := range []string{"gcra", `a"b`, `\`, "é", "\x00", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		b := appendName(nil, name)
		// A structured-field String: quotes around printable ASCII, with
		// '"' and '\' only in escapes.
		if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
			t.Fatalf("%q: not quoted: %s", name, b)
		}
		inner := b[1 : len(b)-1]
		for i := 0; i < len(inner); i++ {
			c := inner[i]
			if c < 0x20 || c > 0x7e {
				t.Fatalf("%q: byte %#x in %s", name, c, b)
			}
			if c == '\\' {
				if i+1 == len(inner) || (inner[i+1] != '"' && inner[i+1] != '\\') {
					t.Fatalf("%q: bad escape in %s", name, b)
				}
				i++
			} else if c == '"' {
				t.Fatalf("%q: bare quote in %s", name, b)
			}
		}
		if !strings.Contains(name, "\\") && !strings.Contains(name, `"`) && len(inner) != len(name) {
			t.Fatalf("%q: length changed: %s", name, b)
		}
	})
}
