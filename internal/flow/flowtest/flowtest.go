// Package flowtest holds the table of HTTP tests that every sluice
// middleware (nethttp, chilimit, ginlimit, echolimit) runs alike, against a
// real redis-server.
//
// Each adapter's test describes itself as an Adapter (its constructors, its
// options and a test server built with its router) and calls Run; every
// case then runs once per adapter.
package flowtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

// Adapter describes one middleware package: O is its Option type, M its
// middleware type.
type Adapter[O ~func(*flow.Config), M any] struct {
	Name string

	FixedWindow, SlidingWindowLog, SlidingWindowCounter,
	LeakyBucket, TokenBucket, GCRA func(redis.UniversalClient, core.Limit, ...O) M
	New func(*core.Limiter, ...O) M

	// UserKey keys by the user that the test server's authentication
	// middleware stored, the router's native way.
	UserKey O
	// RouteKey keys by route pattern, joined with the keys of with.
	RouteKey func(with ...keyfunc.Func) O
	// GlobalBeforeRouting: the Server's global middlewares run before the
	// router has matched a route (net/http middleware around a ServeMux),
	// so keyfunc.Route cannot know it there.
	GlobalBeforeRouting bool

	// Server returns a handler built with the adapter's router, serving:
	//
	//	GET /              200 "ok"
	//	GET /users/{id}    200 "ok"
	//	GET /items/{id}    200 "ok"
	//	GET /limited/{id}  200 "ok", with the Route middlewares on this route only
	//
	// First an authentication middleware stores the user of an
	// "Authorization: Bearer <user>" header (where UserKey reads it), then
	// the Global middlewares run for every route.
	Server func(global, route []M) http.Handler
}

// The options of every adapter are generated from flow's (adaptergen), one
// forwarding line each, checked by TestGeneratedFilesUpToDate: the cases
// take them from flow, converted to the adapter's Option type.

// WithKey is flow.WithKey, as the adapter's Option.
func (Adapter[O, M]) WithKey(x keyfunc.Func) O { return O(flow.WithKey(x)) }

// WithKeyErrorReject is flow.WithKeyErrorReject, as the adapter's Option.
func (Adapter[O, M]) WithKeyErrorReject() O { return O(flow.WithKeyErrorReject()) }

// WithCost is flow.WithCost, as the adapter's Option.
func (Adapter[O, M]) WithCost(x func(*http.Request) int) O { return O(flow.WithCost(x)) }

// WithSkip is flow.WithSkip, as the adapter's Option.
func (Adapter[O, M]) WithSkip(x func(*http.Request) bool) O { return O(flow.WithSkip(x)) }

// WithDenyHandler is flow.WithDenyHandler, as the adapter's Option.
func (Adapter[O, M]) WithDenyHandler(x func(http.ResponseWriter, *http.Request, core.Result)) O {
	return O(flow.WithDenyHandler(x))
}

// WithProblemDetails is flow.WithProblemDetails, as the adapter's Option.
func (Adapter[O, M]) WithProblemDetails() O { return O(flow.WithProblemDetails()) }

// WithHeaders is flow.WithHeaders, as the adapter's Option.
func (Adapter[O, M]) WithHeaders(x flow.HeaderMode) O { return O(flow.WithHeaders(x)) }

// WithFailClosed is flow.WithFailClosed, as the adapter's Option.
func (Adapter[O, M]) WithFailClosed() O { return O(flow.WithFailClosed()) }

// WithFailureMode is flow.WithFailureMode, as the adapter's Option.
func (Adapter[O, M]) WithFailureMode(x core.FailureMode) O { return O(flow.WithFailureMode(x)) }

// WithShadow is flow.WithShadow, as the adapter's Option.
func (Adapter[O, M]) WithShadow() O { return O(flow.WithShadow()) }

// WithLimiterOptions is flow.WithLimiterOptions, as the adapter's Option.
func (Adapter[O, M]) WithLimiterOptions(x ...core.Option) O { return O(flow.WithLimiterOptions(x...)) }

// WithErrorHandler is flow.WithErrorHandler, as the adapter's Option.
func (Adapter[O, M]) WithErrorHandler(x func(*http.Request, error)) O {
	return O(flow.WithErrorHandler(x))
}

// WithTimeout is flow.WithTimeout, as the adapter's Option.
func (Adapter[O, M]) WithTimeout(x time.Duration) O { return O(flow.WithTimeout(x)) }

// WithMaxHold is flow.WithMaxHold, as the adapter's Option.
func (Adapter[O, M]) WithMaxHold(x time.Duration) O { return O(flow.WithMaxHold(x)) }

// WithDenyCache is flow.WithDenyCache, as the adapter's Option.
func (Adapter[O, M]) WithDenyCache(x int) O { return O(flow.WithDenyCache(x)) }

// WithLimiterFunc is flow.WithLimiterFunc, as the adapter's Option.
func (Adapter[O, M]) WithLimiterFunc(x func(*http.Request) *core.Limiter) O {
	return O(flow.WithLimiterFunc(x))
}

// WithPrefix is flow.WithPrefix, as the adapter's Option.
func (Adapter[O, M]) WithPrefix(x string) O { return O(flow.WithPrefix(x)) }

// Timeout bounds decisions on the test Redis: generous, so that a busy
// machine does not turn a slow answer into a failure. Tests of the
// adapters that build limiters of their own pass it too.
const Timeout = 10 * time.Second

// Main is the TestMain of an adapter's tests: the limiters its
// constructors build with the default timeout (in its examples, say) get
// Timeout instead, and the redis-servers the tests started are stopped at
// the end (redistest.Main).
func Main(m *testing.M) {
	flow.RaiseDefaultTimeout(Timeout)
	redistest.Main(m)
}

// Peer is the default RemoteAddr of the test requests.
const Peer = "192.0.2.1:1234"

// step is one request and what its response must be.
type step struct {
	method string // default GET
	path   string
	peer   string            // RemoteAddr; default Peer
	header map[string]string // request headers
	// canceled sends the request with its context canceled: its client
	// has gone
	canceled bool
	status   int
	// want maps a response header to its exact value; "" means absent.
	want  map[string]string
	body  string // a substring of the body, when not empty
	check func(t *testing.T, rec *httptest.ResponseRecorder)
}

type testCase[M any] struct {
	name          string
	global, route []M
	steps         []step
	after         func(t *testing.T)
}

// process is unique per test process, and runs counts the calls of Run in
// it, so that every run has Redis keys of its own (-count=N, a shared
// REDIS_URL server).
var (
	process = strconv.FormatInt(time.Now().UnixNano(), 36)
	runs    atomic.Int64
)

// Run runs every case of the table against a's test server.
func Run[O ~func(*flow.Config), M any](t *testing.T, a Adapter[O, M]) {
	t.Run("construction", func(t *testing.T) { construction(t, a) })
	rdb := redistest.Client(t)
	run := process + "." + strconv.FormatInt(runs.Add(1), 10)
	for _, c := range cases(t, a, rdb, run) {
		t.Run(c.name, func(t *testing.T) {
			h := a.Server(c.global, c.route)
			for i, s := range c.steps {
				do(t, h, i, s)
			}
			if c.after != nil {
				c.after(t)
			}
		})
	}
}

// do sends one step's request and checks its response.
func do(t *testing.T, h http.Handler, i int, s step) {
	t.Helper()
	if s.method == "" {
		s.method = http.MethodGet
	}
	req := httptest.NewRequest(s.method, s.path, nil)
	req.RemoteAddr = Peer
	if s.peer != "" {
		req.RemoteAddr = s.peer
	}
	for k, v := range s.header {
		req.Header.Set(k, v)
	}
	if s.canceled {
		ctx, cancel := context.WithCancel(req.Context())
		cancel()
		req = req.WithContext(ctx)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	where := fmt.Sprintf("step %d (%s %s from %s)", i, s.method, s.path, req.RemoteAddr)
	if rec.Code != s.status {
		t.Fatalf("%s: status %d, want %d; body %q; headers %v", where, rec.Code, s.status, rec.Body, rec.Header())
	}
	for k, want := range s.want {
		if got := rec.Header().Get(k); got != want {
			t.Errorf("%s: %s = %q, want %q", where, k, got, want)
		}
	}
	if s.body != "" && !strings.Contains(rec.Body.String(), s.body) {
		t.Errorf("%s: body %q does not contain %q", where, rec.Body, s.body)
	}
	if s.check != nil {
		s.check(t, rec)
	}
}

// errorLog records what the error hook receives.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) hook(_ *http.Request, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// expect returns a check that the hook has received n errors, each
// matching target with errors.Is (when target is not nil).
func (l *errorLog) expect(n int, target error) func(*testing.T) {
	return func(t *testing.T) {
		t.Helper()
		errs := l.all()
		if len(errs) != n {
			t.Fatalf("error hook got %d errors %v, want %d", len(errs), errs, n)
		}
		for _, err := range errs {
			if target != nil && !errors.Is(err, target) {
				t.Errorf("error hook got %v, want one wrapping %v", err, target)
			}
		}
	}
}

// stuck returns a client of a server that accepts connections and never
// answers: every command waits for the client's ReadTimeout (3s).
func stuck(t *testing.T) *redis.Client {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: l.Addr().String()})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		c.Close()
	})
	return c
}

// statuses returns steps of GET path expecting the given statuses.
func statuses(path string, codes ...int) []step {
	steps := make([]step, len(codes))
	for i, code := range codes {
		steps[i] = step{path: path, status: code}
	}
	return steps
}

// cases returns the table, built with a's constructors and options.
func cases[O ~func(*flow.Config), M any](t *testing.T, a Adapter[O, M], rdb *redis.Client, run string) []testCase[M] {
	// prefix gives a middleware its own Redis keys, and a timeout long
	// enough for a loaded test machine (the timeout cases set their own).
	prefix := func(name string) O {
		p, tm := a.WithPrefix("flowtest-"+run+"-"+a.Name+"-"+name), a.WithTimeout(Timeout)
		return O(func(c *flow.Config) { p(c); tm(c) })
	}
	corePrefix := func(name string) core.Option {
		return core.WithPrefix("flowtest-" + run + "-" + a.Name + "-" + name)
	}
	coreTimeout := core.WithTimeout(Timeout)
	mustLimiter := func(l *core.Limiter, err error) *core.Limiter {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	var cs []testCase[M]
	add := func(c testCase[M]) { cs = append(cs, c) }

	// The allowed/denied sequence of every algorithm: PerMinute(3) admits
	// three requests, then denies. LeakyBucket admits them with a delay,
	// recorded instead of slept.
	algs := []struct {
		name string
		ctor func(redis.UniversalClient, core.Limit, ...O) M
	}{
		{"fixed_window", a.FixedWindow}, {"sliding_window_log", a.SlidingWindowLog},
		{"sliding_window_counter", a.SlidingWindowCounter}, {"leaky_bucket", a.LeakyBucket},
		{"token_bucket", a.TokenBucket}, {"gcra", a.GCRA},
	}
	for _, alg := range algs {
		noSleep := O(func(c *flow.Config) { c.Sleep = func(context.Context, time.Duration) error { return nil } })
		// Per hour, so that no fixed-window edge falls inside the test.
		opts := []O{prefix("seq-" + alg.name), noSleep}
		if alg.name == "leaky_bucket" {
			opts = append(opts, a.WithMaxHold(2*time.Hour)) // (only a LeakyBucket holds)
		}
		mw := alg.ctor(rdb, core.PerHour(3), opts...)
		steps := statuses("/", 200, 200, 200, 429)
		for i := range steps {
			steps[i].check = func(t *testing.T, rec *httptest.ResponseRecorder) {
				p := rec.Header().Get("RateLimit-Policy")
				if want := `"` + alg.name + `";q=3;w=3600`; p != want {
					t.Errorf("RateLimit-Policy = %q, want %q", p, want)
				}
				if !strings.HasPrefix(rec.Header().Get("RateLimit"), `"`+alg.name+`";r=`) {
					t.Errorf("RateLimit = %q", rec.Header().Get("RateLimit"))
				}
			}
		}
		steps[3].want = map[string]string{"Content-Type": "text/plain; charset=utf-8"}
		add(testCase[M]{name: "sequence/" + alg.name, global: []M{mw}, steps: steps})
	}

	// Exact header values. TokenBucket PerMinute(3): each event takes 20s
	// to refill, so t counts 20s per event consumed (rounded up).
	add(testCase[M]{
		name:   "headers/draft",
		global: []M{a.TokenBucket(rdb, core.PerMinute(3), prefix("headers-draft"))},
		steps: []step{
			{path: "/", status: 200, want: map[string]string{
				"RateLimit-Policy": `"token_bucket";q=3;w=60`, "RateLimit": `"token_bucket";r=2;t=20`,
				"Retry-After": "", "X-RateLimit-Limit": ""}},
			{path: "/", status: 200, want: map[string]string{"RateLimit": `"token_bucket";r=1;t=40`}},
			{path: "/", status: 200, want: map[string]string{"RateLimit": `"token_bucket";r=0;t=60`}},
			{path: "/", status: 429, body: "Too Many Requests", want: map[string]string{
				"RateLimit-Policy": `"token_bucket";q=3;w=60`, "RateLimit": `"token_bucket";r=0;t=20`,
				"Retry-After": "20", "Content-Type": "text/plain; charset=utf-8"}},
		},
	})
	legacyReset := func(lo, hi time.Duration) func(*testing.T, *httptest.ResponseRecorder) {
		before := time.Now()
		return func(t *testing.T, rec *httptest.ResponseRecorder) {
			got, err := strconv.ParseInt(rec.Header().Get("X-RateLimit-Reset"), 10, 64)
			if err != nil {
				t.Fatalf("X-RateLimit-Reset: %v", err)
			}
			if min, max := before.Add(lo).Unix(), time.Now().Add(hi).Unix()+1; got < min || got > max {
				t.Errorf("X-RateLimit-Reset = %d, want within [%d, %d]", got, min, max)
			}
		}
	}
	add(testCase[M]{
		name:   "headers/legacy",
		global: []M{a.TokenBucket(rdb, core.PerMinute(3), prefix("headers-legacy"), a.WithHeaders(flow.HeadersLegacy))},
		steps: []step{
			{path: "/", status: 200, check: legacyReset(19*time.Second, 20*time.Second), want: map[string]string{
				"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "RateLimit": "", "RateLimit-Policy": ""}},
			{path: "/", status: 200},
			{path: "/", status: 200, want: map[string]string{"X-RateLimit-Remaining": "0"}},
			{path: "/", status: 429, check: legacyReset(59*time.Second, 60*time.Second), want: map[string]string{
				"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "Retry-After": "20"}},
		},
	})
	add(testCase[M]{
		name:   "headers/both",
		global: []M{a.GCRA(rdb, core.PerMinute(3), prefix("headers-both"), a.WithHeaders(flow.HeadersBoth))},
		steps: []step{{path: "/", status: 200, want: map[string]string{
			"RateLimit-Policy": `"gcra";q=3;w=60`, "RateLimit": `"gcra";r=2;t=20`,
			"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2"}}},
	})
	add(testCase[M]{
		name:   "headers/none",
		global: []M{a.GCRA(rdb, core.PerMinute(1), prefix("headers-none"), a.WithHeaders(flow.HeadersNone))},
		steps: []step{
			{path: "/", status: 200, want: map[string]string{"RateLimit": "", "RateLimit-Policy": "", "X-RateLimit-Limit": ""}},
			{path: "/", status: 429, want: map[string]string{"RateLimit": "", "Retry-After": "60"}},
		},
	})
	// A sub-second period: w is rounded up to 1, and so are t and
	// Retry-After (at least 1, never 0). The token comes back 999ms after
	// the first request: the second must come before (on a loaded
	// machine, a period shorter still could pass between two requests).
	add(testCase[M]{
		name:   "headers/sub-second",
		global: []M{a.TokenBucket(rdb, core.Limit{Rate: 1, Period: 999 * time.Millisecond}, prefix("headers-subsecond"))},
		steps: []step{
			{path: "/", status: 200, want: map[string]string{
				"RateLimit-Policy": `"token_bucket";q=1;w=1`, "RateLimit": `"token_bucket";r=0;t=1`}},
			{path: "/", status: 429, want: map[string]string{"RateLimit": `"token_bucket";r=0;t=1`, "Retry-After": "1"}},
		},
	})
	// A two-rule policy: both rules in both headers; the stricter denies.
	policy := mustLimiter(core.NewPolicy(rdb, []core.Rule{
		{Name: "minute", Algorithm: core.GCRA, Limit: core.PerMinute(2)},
		{Name: "hour", Algorithm: core.TokenBucket, Limit: core.PerHour(5)},
	}, corePrefix("policy"), coreTimeout))
	pd := &errorLog{}
	add(testCase[M]{
		name:   "policy",
		global: []M{a.New(policy, a.WithProblemDetails(), a.WithErrorHandler(pd.hook))},
		steps: []step{
			{path: "/", status: 200, want: map[string]string{
				"RateLimit-Policy": `"minute";q=2;w=60, "hour";q=5;w=3600`,
				"RateLimit":        `"minute";r=1;t=30, "hour";r=4;t=720`}},
			{path: "/", status: 200, want: map[string]string{"RateLimit": `"minute";r=0;t=60, "hour";r=3;t=1440`}},
			{path: "/", status: 429, check: problem([]string{"minute"}, 30), want: map[string]string{
				"RateLimit-Policy": `"minute";q=2;w=60, "hour";q=5;w=3600`,
				"RateLimit":        `"minute";r=0;t=30, "hour";r=3;t=1440`,
				"Retry-After":      "30", "Content-Type": "application/problem+json"}},
		},
		after: pd.expect(0, nil),
	})

	// Skip: exempt requests carry no headers and consume nothing.
	add(testCase[M]{
		name: "skip",
		global: []M{a.GCRA(rdb, core.PerMinute(1), prefix("skip"),
			a.WithSkip(func(r *http.Request) bool { return r.Header.Get("X-Internal") == "yes" }))},
		steps: []step{
			{path: "/", header: map[string]string{"X-Internal": "yes"}, status: 200, want: map[string]string{"RateLimit": ""}},
			{path: "/", header: map[string]string{"X-Internal": "yes"}, status: 200},
			{path: "/", status: 200, want: map[string]string{"RateLimit": `"gcra";r=0;t=60`}},
			{path: "/", status: 429},
			{path: "/", header: map[string]string{"X-Internal": "yes"}, status: 200},
		},
	})

	// Cost: from a header; below 1 counts 1; above the capacity is 413.
	costs := &errorLog{}
	cost := func(n string) map[string]string { return map[string]string{"X-Cost": n} }
	add(testCase[M]{
		name: "cost",
		global: []M{a.SlidingWindowLog(rdb, core.PerMinute(10), prefix("cost"), a.WithErrorHandler(costs.hook),
			a.WithCost(func(r *http.Request) int { n, _ := strconv.Atoi(r.Header.Get("X-Cost")); return n }))},
		steps: []step{
			{path: "/", header: cost("4"), status: 200, want: map[string]string{"RateLimit": `"sliding_window_log";r=6;t=60`}},
			{path: "/", header: cost("4"), status: 200, want: map[string]string{"RateLimit": `"sliding_window_log";r=2;t=60`}},
			{path: "/", header: cost("4"), status: 429},
			{path: "/", header: cost("0"), status: 200, want: map[string]string{"RateLimit": `"sliding_window_log";r=1;t=60`}},
			{path: "/", header: cost("11"), status: 413, want: map[string]string{"RateLimit": "", "Retry-After": ""}},
			{path: "/", status: 200, want: map[string]string{"RateLimit": `"sliding_window_log";r=0;t=60`}},
		},
		after: costs.expect(1, core.ErrCostExceedsLimit),
	})

	// A custom deny handler sees the headers already set and the result.
	var denied core.Result
	add(testCase[M]{
		name: "deny-handler",
		global: []M{a.FixedWindow(rdb, core.PerHour(1), prefix("deny"),
			a.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, res core.Result) {
				denied = res
				w.Header().Set("X-Seen-Retry-After", w.Header().Get("Retry-After"))
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, "slow down")
			}))},
		steps: []step{
			{path: "/", status: 200},
			{path: "/", status: 503, body: "slow down", check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				if denied.Allowed || denied.Rule != "fixed_window" || denied.Limit.Rate != 1 || denied.RetryAfter <= 0 {
					t.Errorf("deny handler got %+v", denied)
				}
				if ra := rec.Header().Get("X-Seen-Retry-After"); ra == "" || ra != rec.Header().Get("Retry-After") {
					t.Errorf("deny handler saw Retry-After %q, response has %q", ra, rec.Header().Get("Retry-After"))
				}
				if rec.Header().Get("RateLimit") == "" {
					t.Error("no RateLimit header on a custom denial")
				}
			}},
		},
	})
	add(testCase[M]{
		name:   "problem-details",
		global: []M{a.SlidingWindowLog(rdb, core.PerMinute(1), prefix("problem"), a.WithProblemDetails())},
		steps: []step{
			{path: "/", status: 200},
			{path: "/", status: 429, check: problem([]string{"sliding_window_log"}, 60), want: map[string]string{
				"Content-Type": "application/problem+json", "Retry-After": "60"}},
		},
	})

	// Redis failures: fail open serves without headers and reports; fail
	// closed answers 503. Both answer at once (connection refused) or
	// within the timeout (a server that never answers).
	open := &errorLog{}
	add(testCase[M]{
		name:   "fail-open",
		global: []M{a.TokenBucket(redistest.RefusedClient(t), core.PerSecond(1), a.WithErrorHandler(open.hook))},
		steps: []step{
			{path: "/", status: 200, body: "ok", want: map[string]string{"RateLimit": "", "RateLimit-Policy": "", "Retry-After": ""}},
			{path: "/", status: 200},
		},
		after: open.expect(2, nil),
	})
	closed := &errorLog{}
	add(testCase[M]{
		name:   "fail-closed",
		global: []M{a.TokenBucket(redistest.RefusedClient(t), core.PerSecond(1), a.WithFailClosed(), a.WithErrorHandler(closed.hook))},
		steps: []step{
			{path: "/", status: 503, want: map[string]string{"RateLimit": ""}},
		},
		after: closed.expect(1, nil),
	})
	slow := &errorLog{}
	add(testCase[M]{
		name: "timeout",
		global: []M{a.TokenBucket(stuck(t), core.PerSecond(1),
			a.WithTimeout(50*time.Millisecond), a.WithErrorHandler(slow.hook))},
		steps: []step{{path: "/", status: 200, want: map[string]string{"RateLimit": ""}}},
		after: slow.expect(1, context.DeadlineExceeded),
	})
	slowClosed := &errorLog{}
	add(testCase[M]{
		name: "timeout-fail-closed",
		global: []M{a.TokenBucket(stuck(t), core.PerSecond(1),
			a.WithTimeout(50*time.Millisecond), a.WithFailClosed(), a.WithErrorHandler(slowClosed.hook))},
		steps: []step{{path: "/", status: 503}},
		after: slowClosed.expect(1, context.DeadlineExceeded),
	})

	// The middleware's failure mode FailLocal: the constructor's limiter
	// decides with its in-process twin, headers and all.
	localMW := &errorLog{}
	add(testCase[M]{
		name: "fail-local",
		global: []M{a.GCRA(redistest.RefusedClient(t), core.PerMinute(2), a.WithFailureMode(core.FailLocal),
			a.WithErrorHandler(localMW.hook))},
		steps: []step{
			{path: "/", status: 200, want: map[string]string{"RateLimit": `"gcra";r=1;t=30`}},
			{path: "/", status: 200},
			{path: "/", status: 429, want: map[string]string{"Retry-After": "30"}},
		},
		after: localMW.expect(3, nil),
	})

	// Shadow mode: never denies, tells clients nothing, and the observer
	// sees what would have been denied.
	var shadowMu sync.Mutex
	var shadowEvents []core.Event
	observe := core.WithObserver(func(e core.Event) {
		shadowMu.Lock()
		shadowEvents = append(shadowEvents, e)
		shadowMu.Unlock()
	})
	add(testCase[M]{
		name: "shadow",
		global: []M{a.FixedWindow(rdb, core.PerHour(1), prefix("shadow"), a.WithShadow(),
			a.WithLimiterOptions(observe))},
		steps: []step{
			{path: "/", status: 200, body: "ok", want: map[string]string{"RateLimit": "", "RateLimit-Policy": ""}},
			{path: "/", status: 200, body: "ok", want: map[string]string{"RateLimit": "", "Retry-After": ""}},
		},
		after: func(t *testing.T) {
			shadowMu.Lock()
			defer shadowMu.Unlock()
			if len(shadowEvents) != 2 || shadowEvents[0].Outcome != core.OutcomeAllowed ||
				shadowEvents[1].Outcome != core.OutcomeDenied || !shadowEvents[1].Shadow {
				t.Errorf("observed %+v; want allowed, then a shadow denial", shadowEvents)
			}
		},
	})

	// A limiter's own failure mode: FailLocal decides with the in-process
	// twin (headers and all, errors still reported); FailClosed denies.
	localLog := &errorLog{}
	local := mustLimiter(core.New(redistest.RefusedClient(t), core.GCRA, core.PerMinute(2), core.WithFailureMode(core.FailLocal)))
	add(testCase[M]{
		name:   "limiter-fail-local",
		global: []M{a.New(local, a.WithErrorHandler(localLog.hook))},
		steps: []step{
			{path: "/", status: 200, want: map[string]string{"RateLimit-Policy": `"gcra";q=2;w=60`, "RateLimit": `"gcra";r=1;t=30`}},
			{path: "/", status: 200},
			{path: "/", status: 429, want: map[string]string{"Retry-After": "30"}},
		},
		after: localLog.expect(3, nil),
	})
	shut := mustLimiter(core.New(redistest.RefusedClient(t), core.GCRA, core.PerMinute(2), core.WithFailureMode(core.FailClosed)))
	shutLog := &errorLog{}
	add(testCase[M]{
		name:   "limiter-fail-closed",
		global: []M{a.New(shut, a.WithErrorHandler(shutLog.hook))},
		steps:  []step{{path: "/", status: 503, want: map[string]string{"RateLimit": ""}}},
		after:  shutLog.expect(1, nil),
	})

	// Per-route limits: only /limited/{id} is limited, and its own way.
	add(testCase[M]{
		name:  "per-route",
		route: []M{a.FixedWindow(rdb, core.PerHour(1), prefix("per-route"))},
		steps: []step{
			{path: "/limited/1", status: 200, want: map[string]string{"RateLimit-Policy": `"fixed_window";q=1;w=3600`}},
			{path: "/limited/2", status: 429},
			{path: "/", status: 200, want: map[string]string{"RateLimit": ""}},
			{path: "/", status: 200},
			{path: "/users/1", status: 200, want: map[string]string{"RateLimit": ""}},
		},
	})
	// A global and a per-route limit together: both apply on the route,
	// and the client is told of both (the route's under a distinct name).
	add(testCase[M]{
		name:   "global-and-route",
		global: []M{a.GCRA(rdb, core.PerMinute(3), prefix("global-and-route-global"))},
		route:  []M{a.GCRA(rdb, core.PerMinute(1), prefix("global-and-route-route"))},
		steps: []step{
			{path: "/limited/1", status: 200, want: map[string]string{
				"RateLimit-Policy": `"gcra";q=3;w=60, "gcra-2";q=1;w=60`,
				"RateLimit":        `"gcra";r=2;t=20, "gcra-2";r=0;t=60`}},
			{path: "/limited/1", status: 429, want: map[string]string{
				"RateLimit": `"gcra";r=1;t=40, "gcra-2";r=0;t=60`, "Retry-After": "60"}},
			{path: "/", status: 200, want: map[string]string{"RateLimit": `"gcra";r=0;t=60`}},
			{path: "/", status: 429, want: map[string]string{"RateLimit": `"gcra";r=0;t=20`}},
		},
	})

	// Route keys: one bucket per route pattern, whatever the path values.
	add(testCase[M]{
		name:   "route-key",
		global: []M{a.GCRA(rdb, core.PerMinute(1), prefix("route-key"), a.RouteKey())},
		steps: []step{
			{path: "/users/1", status: 200},
			{path: "/users/2", status: 429, peer: "198.51.100.9:4000"},
			{path: "/items/1", status: 200},
			{path: "/items/2", status: 429},
			{path: "/", status: 200},
			{path: "/limited/7", status: 200},
			{path: "/nowhere/1", status: 404},
			{path: "/nowhere/2", status: 429},
		},
	})
	add(testCase[M]{
		name:   "route-key-per-client",
		global: []M{a.GCRA(rdb, core.PerMinute(1), prefix("route-key-client"), a.RouteKey(keyfunc.RemoteIP()))},
		steps: []step{
			{path: "/users/1", status: 200},
			{path: "/users/2", status: 429},
			{path: "/users/2", status: 200, peer: "198.51.100.9:4000"},
			{path: "/items/1", status: 200},
		},
	})
	cs = append(cs, routeCases(a, rdb, prefix)...)

	// The default key is the peer address only: a spoofed X-Forwarded-For
	// changes nothing; IPv6 peers are grouped by /64.
	add(testCase[M]{
		name:   "default-key",
		global: []M{a.FixedWindow(rdb, core.PerHour(1), prefix("default-key"))},
		steps: []step{
			{path: "/", status: 200, header: map[string]string{"X-Forwarded-For": "203.0.113.1"}},
			{path: "/", status: 429, header: map[string]string{"X-Forwarded-For": "203.0.113.2", "X-Real-IP": "203.0.113.3"}},
			{path: "/", status: 200, peer: "198.51.100.9:4000"},
			{path: "/", status: 200, peer: "[2001:db8::1]:4000"},
			{path: "/", status: 429, peer: "[2001:db8::2]:4000"},
			{path: "/", status: 200, peer: "[2001:db8:0:1::1]:4000"},
		},
	})

	// User keys: signed-in users by account; anonymous requests fall back
	// to the peer address and are reported, or rejected with 400.
	users := &errorLog{}
	bearer := func(user string) map[string]string { return map[string]string{"Authorization": "Bearer " + user} }
	add(testCase[M]{
		name:   "user-key",
		global: []M{a.GCRA(rdb, core.PerMinute(1), prefix("user-key"), a.UserKey, a.WithErrorHandler(users.hook))},
		steps: []step{
			{path: "/", header: bearer("alice"), status: 200},
			{path: "/", header: bearer("alice"), status: 429, peer: "198.51.100.9:4000"},
			{path: "/", header: bearer("bob"), status: 200},
			{path: "/", status: 200},
			{path: "/", status: 429},
			{path: "/", status: 200, peer: "198.51.100.9:4000"},
		},
		after: users.expect(3, flow.ErrKey),
	})
	rejected := &errorLog{}
	add(testCase[M]{
		name: "key-error-reject",
		global: []M{a.GCRA(rdb, core.PerMinute(1), prefix("key-reject"), a.UserKey,
			a.WithKeyErrorReject(), a.WithErrorHandler(rejected.hook))},
		steps: []step{
			{path: "/", header: bearer("carol"), status: 200},
			{path: "/", status: 400, want: map[string]string{"RateLimit": ""}},
		},
		after: rejected.expect(1, keyfunc.ErrNoKey),
	})
	headerKey := &errorLog{}
	add(testCase[M]{
		name: "key-error-fallback",
		global: []M{a.GCRA(rdb, core.PerMinute(1), prefix("key-fallback"),
			a.WithKey(keyfunc.Header("X-API-Key")), a.WithErrorHandler(headerKey.hook))},
		steps: []step{
			{path: "/", header: map[string]string{"X-API-Key": "k1"}, status: 200},
			{path: "/", header: map[string]string{"X-API-Key": "k1"}, status: 429},
			{path: "/", status: 200},
			{path: "/", status: 429},
			{path: "/", status: 200, peer: "unix-socket-peer"},
			{path: "/", status: 429, peer: "@"},
		},
		after: headerKey.expect(4, flow.ErrKey),
	})

	// LeakyBucket shapes: the second request is held for its Delay (the
	// test hook records it instead of sleeping); a delay beyond the bound
	// is a denial.
	var held []time.Duration
	var heldMu sync.Mutex
	record := O(func(c *flow.Config) {
		c.Sleep = func(_ context.Context, d time.Duration) error {
			heldMu.Lock()
			defer heldMu.Unlock()
			held = append(held, d)
			return nil
		}
	})
	// A name means what it means in core, default included: the
	// constructors' limiter caches no denial unless asked
	// (WithDenyCache), so a Reset made through another limiter (another
	// instance, an operator's tool) takes effect at the next request.
	add(testCase[M]{
		name:   "reset-elsewhere",
		global: []M{a.GCRA(rdb, core.PerHour(1), prefix("reset-elsewhere"))},
		steps: []step{
			{path: "/", status: 200},
			{path: "/", status: 429, check: func(t *testing.T, _ *httptest.ResponseRecorder) {
				other := mustLimiter(core.New(rdb, core.GCRA, core.PerHour(1), corePrefix("reset-elsewhere"), coreTimeout))
				defer other.Close()
				key, err := keyfunc.RemoteIP()(&http.Request{RemoteAddr: Peer})
				if err != nil {
					t.Fatal(err)
				}
				if err := other.Reset(context.Background(), key); err != nil {
					t.Fatal(err)
				}
			}},
			{path: "/", status: 200},
		},
	})
	// One request every 10s, a bound of 15s: the second request waits 10s
	// (recorded, not slept), the third would wait 20s and is denied, with
	// 5s to go until its wait fits. The steps have those 5s to run in.
	add(testCase[M]{
		name: "leaky-delay",
		global: []M{a.LeakyBucket(rdb, core.PerMinute(6), prefix("leaky"), record,
			a.WithMaxHold(15*time.Second))},
		steps: []step{
			{path: "/", status: 200},
			{path: "/", status: 200},
			{path: "/", status: 429, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				if ra, _ := strconv.Atoi(rec.Header().Get("Retry-After")); ra < 1 {
					t.Errorf("Retry-After = %q", rec.Header().Get("Retry-After"))
				}
				if !strings.HasPrefix(rec.Header().Get("RateLimit"), `"leaky_bucket";r=`) {
					t.Errorf("RateLimit = %q", rec.Header().Get("RateLimit"))
				}
			}},
		},
		after: func(t *testing.T) {
			heldMu.Lock()
			defer heldMu.Unlock()
			if len(held) != 1 || held[0] <= 0 || held[0] > 10*time.Second {
				t.Errorf("held for %v, want one delay in (0, 10s]", held)
			}
		},
	})
	// A delay past WithMaxHold is denied by Redis and takes no place in
	// the bucket: no later denial's Retry-After is later than the first's
	// (5s, as above; one that took a place would add 10s).
	firstRetry := 0
	retryNoLater := func(t *testing.T, rec *httptest.ResponseRecorder) {
		ra, err := strconv.Atoi(rec.Header().Get("Retry-After"))
		if err != nil || ra < 1 || ra > 5 {
			t.Errorf("Retry-After = %q, want 1 to 5", rec.Header().Get("Retry-After"))
		}
		if firstRetry == 0 {
			firstRetry = ra
		} else if ra > firstRetry {
			t.Errorf("Retry-After = %d after a first denial's %d: the denied request took a place", ra, firstRetry)
		}
	}
	add(testCase[M]{
		name: "leaky-max-delay-consumes-nothing",
		global: []M{a.LeakyBucket(rdb, core.PerMinute(6), prefix("leaky-bound"), record,
			a.WithMaxHold(15*time.Second))},
		steps: []step{
			{path: "/", status: 200},
			{path: "/", status: 200},
			{path: "/", status: 429, check: retryNoLater},
			{path: "/", status: 429, check: retryNoLater},
			{path: "/", status: 429, check: retryNoLater},
		},
	})
	// A request whose client goes away, before the decision or while held,
	// is not served, and is answered 499 (client closed request): an
	// access log must not record it as served.
	add(testCase[M]{
		name:   "client-gone",
		global: []M{a.GCRA(rdb, core.PerMinute(60), prefix("gone"))},
		steps: []step{
			{path: "/", status: 499, canceled: true, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				if rec.Body.Len() != 0 {
					t.Errorf("a client gone before the decision was answered %q", rec.Body)
				}
			}},
			{path: "/", status: 200, body: "ok"},
		},
	})
	add(testCase[M]{
		name: "leaky-client-gone",
		global: []M{a.LeakyBucket(rdb, core.PerMinute(60), prefix("leaky-gone"),
			O(func(c *flow.Config) {
				c.Sleep = func(context.Context, time.Duration) error { return context.Canceled }
			}))},
		steps: []step{
			{path: "/", status: 200, body: "ok"},
			{path: "/", status: 499, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				if rec.Body.Len() != 0 {
					t.Errorf("handler ran for a client that went away: %q", rec.Body)
				}
			}},
		},
	})

	// The limit chosen per request: a plan header picks the limiter.
	pro := mustLimiter(core.New(rdb, core.TokenBucket, core.PerMinute(5), corePrefix("plan-pro"), coreTimeout))
	free := mustLimiter(core.New(rdb, core.TokenBucket, core.PerMinute(1), corePrefix("plan-free"), coreTimeout))
	plan := func(r *http.Request) *core.Limiter {
		if r.Header.Get("X-Plan") == "pro" {
			return pro
		}
		return nil
	}
	add(testCase[M]{
		name:   "limiter-func",
		global: []M{a.New(free, a.WithLimiterFunc(plan))},
		steps: []step{
			{path: "/", status: 200, want: map[string]string{"RateLimit-Policy": `"token_bucket";q=1;w=60`}},
			{path: "/", status: 429},
			{path: "/", header: map[string]string{"X-Plan": "pro"}, status: 200,
				want: map[string]string{"RateLimit-Policy": `"token_bucket";q=5;w=60`, "RateLimit": `"token_bucket";r=4;t=12`}},
		},
	})
	none := &errorLog{}
	add(testCase[M]{
		name:   "no-limiter",
		global: []M{a.New(nil, a.WithLimiterFunc(plan), a.WithFailClosed(), a.WithErrorHandler(none.hook))},
		steps: []step{
			{path: "/", status: 503},
			{path: "/", header: map[string]string{"X-Plan": "pro"}, status: 200},
		},
		after: none.expect(1, flow.ErrNoLimiter),
	})
	return cs
}

// problem returns a check of an RFC 9457 body.
func problem(violated []string, retry int) func(*testing.T, *httptest.ResponseRecorder) {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		var p struct {
			Type             string   `json:"type"`
			Title            string   `json:"title"`
			Status           int      `json:"status"`
			Detail           string   `json:"detail"`
			ViolatedPolicies []string `json:"violated-policies"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatalf("problem body %q: %v", rec.Body, err)
		}
		if p.Type != flow.ProblemType || p.Title != "Too Many Requests" || p.Status != 429 ||
			!strings.Contains(p.Detail, "retry in "+flow.Seconds(int64(retry))+".") ||
			strings.Join(p.ViolatedPolicies, ",") != strings.Join(violated, ",") {
			t.Errorf("problem = %+v, want violated-policies %v and %d seconds", p, violated, retry)
		}
	}
}

// construction checks that the algorithm constructors panic on an invalid
// limit, naming the constructor and the problem, and that New does not.
func construction[O ~func(*flow.Config), M any](t *testing.T, a Adapter[O, M]) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	ctors := map[string]func(redis.UniversalClient, core.Limit, ...O) M{
		"FixedWindow": a.FixedWindow, "SlidingWindowLog": a.SlidingWindowLog,
		"SlidingWindowCounter": a.SlidingWindowCounter, "LeakyBucket": a.LeakyBucket,
		"TokenBucket": a.TokenBucket, "GCRA": a.GCRA,
	}
	bad := []struct {
		limit core.Limit
		want  string
	}{
		{core.Limit{Rate: 0, Period: time.Second}, "rate 0 must be positive"},
		{core.Limit{Rate: 5, Period: 0}, "period 0s must be positive"},
		{core.Limit{Rate: 5, Period: time.Second, Burst: -1}, "burst -1 must not be negative"},
	}
	for name, ctor := range ctors {
		for _, b := range bad {
			msg := panicMessage(func() { ctor(rdb, b.limit) })
			if !strings.Contains(msg, a.Name+"."+name) || !strings.Contains(msg, b.want) {
				t.Errorf("%s.%s(%v) panicked with %q, want a message naming %q", a.Name, name, b.limit, msg, b.want)
			}
		}
		if msg := panicMessage(func() { ctor(nil, core.PerSecond(1)) }); !strings.Contains(msg, "nil Redis client") {
			t.Errorf("%s.%s(nil client) panicked with %q", a.Name, name, msg)
		}
		if msg := panicMessage(func() { ctor(rdb, core.PerSecond(1), a.WithPrefix("a{b}")) }); !strings.Contains(msg, "prefix") {
			t.Errorf("%s.%s with prefix a{b} panicked with %q", a.Name, name, msg)
		}
		if msg := panicMessage(func() { ctor(rdb, core.PerSecond(1), a.WithDenyCache(-1)) }); !strings.Contains(msg, "deny cache of -1 keys") {
			t.Errorf("%s.%s with WithDenyCache(-1) panicked with %q", a.Name, name, msg)
		}
		if msg := panicMessage(func() { ctor(rdb, core.PerSecond(1)) }); msg != "" {
			t.Errorf("%s.%s(PerSecond(1)) panicked: %s", a.Name, name, msg)
		}
	}
	// New(nil) has nothing to decide with: it would serve everything
	// unlimited, reporting an error per request. It panics at once instead.
	if msg := panicMessage(func() { a.New(nil) }); !strings.Contains(msg, a.Name+".New") || !strings.Contains(msg, "nil limiter and no WithLimiterFunc") {
		t.Errorf("%s.New(nil) panicked with %q, want a message naming %s.New and the nil limiter", a.Name, msg, a.Name)
	}
	if msg := panicMessage(func() { a.New(nil, a.WithLimiterFunc(nil)) }); !strings.Contains(msg, "nil limiter and no WithLimiterFunc") {
		t.Errorf("%s.New(nil, WithLimiterFunc(nil)) panicked with %q, want the nil limiter named", a.Name, msg)
	}
	pick := func(*http.Request) *core.Limiter { return nil }
	if msg := panicMessage(func() { a.New(nil, a.WithLimiterFunc(pick)) }); msg != "" {
		t.Errorf("%s.New(nil, WithLimiterFunc(f)) panicked: %s", a.Name, msg)
	}
	lim, err := core.New(rdb, core.GCRA, core.PerSecond(1))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if msg := panicMessage(func() { a.New(lim) }); msg != "" {
		t.Errorf("%s.New(limiter) panicked: %s", a.Name, msg)
	}
}

// panicMessage runs f and returns what it panicked with, or "".
func panicMessage(f func()) (msg string) {
	defer func() {
		if v := recover(); v != nil {
			msg = fmt.Sprint(v)
			if msg == "" {
				msg = "(empty panic)"
			}
		}
	}()
	f()
	return ""
}

// Prefix returns a Redis key prefix of t's own, unique in this process and
// across processes, for tests outside the table.
func Prefix(t *testing.T) string {
	name := strings.Map(func(r rune) rune {
		if r == '{' || r == '}' {
			return '_'
		}
		return r
	}, t.Name())
	return "flowtest-" + process + "." + strconv.FormatInt(runs.Add(1), 10) + "-" + name
}
