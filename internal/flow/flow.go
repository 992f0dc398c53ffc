// Package flow is the request flow shared by every sluice middleware:
// key, decide, headers, then proceed, delay, deny or handle the error.
//
// The packages nethttp, chilimit, ginlimit and echolimit translate their
// router's context into a call of [Flow.Admit] and delegate everything else
// here, so the flow is written once and behaves the same in every router.
package flow

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/ctxsleep"
	"github.com/sluicehq/sluice/internal/peerkey"
	"github.com/sluicehq/sluice/keyfunc"
)

// defaultTimeout is DefaultTimeout, raised by the adapters' tests (see
// RaiseDefaultTimeout): they build limiters with the defaults on miniredis
// under the race detector, on shared machines, and assert decisions, not
// latency. (core's tests raise core's default the same way.)
var defaultTimeout = DefaultTimeout

// RaiseDefaultTimeout makes d the timeout that the constructors use when
// WithTimeout is not given, for tests only (flowtest.Main); it is called
// before any test runs.
func RaiseDefaultTimeout(d time.Duration) { defaultTimeout = d }

// unknownPeer is the key of requests whose peer address cannot be read
// either: they share one bucket rather than go unlimited.
const unknownPeer = "ip:unknown"

// DenyFunc writes the response to a denied request. The rate-limit headers
// and Retry-After are already set on w when it is called.
type DenyFunc func(w http.ResponseWriter, r *http.Request, res core.Result)

// Config is what the middleware options set. Its zero value is not ready:
// use [New] or [Must], which fill in the defaults.
type Config struct {
	// Key returns the key of a request; rc is the router's own context
	// (*gin.Context, echo.Context) or nil for net/http and chi.
	Key            func(r *http.Request, rc any) (string, error)
	Cost           func(*http.Request) int
	Skip           func(*http.Request) bool
	Deny           DenyFunc
	Headers        HeaderMode
	FailureMode    core.FailureMode
	Shadow         bool
	DenyCache      int
	LimiterOptions []core.Option
	OnError        func(*http.Request, error)
	Timeout        time.Duration
	MaxHold        time.Duration
	LimiterFor     func(*http.Request) *core.Limiter
	KeyErrorReject bool
	// Prefix is passed to core.WithPrefix by the algorithm constructors.
	Prefix string
	// Sleep holds a LeakyBucket request for d or until ctx is done. Tests
	// replace it to observe the delay without waiting.
	Sleep func(ctx context.Context, d time.Duration) error

	// customKey and customDeny record that WithKey (or WithContextKey) and
	// WithDenyHandler replaced the defaults (see Flow.ReadsRoute).
	customKey, customDeny bool

	forLimiter limiterOption // the first option set that only a constructor's limiter takes (see MustNew)
	prefixed   bool          // WithPrefix was given, "" included: core.New refuses ""
	holds      bool          // WithMaxHold was given: only a LeakyBucket holds
	misused    []misuse      // the settings last given a value they cannot take (see mustBeValid)
}

// misuse is a setting of Config last given, by an option, a value it
// cannot take, and what to say of it.
type misuse struct{ setting, msg string }

// mistake records that setting was given a value it cannot take, which Must
// and MustNew refuse with msg, unless an option gives it a valid one later
// (see valid): the last value counts, as for every option.
func (c *Config) mistake(setting, format string, args ...any) {
	c.valid(setting)
	c.misused = append(c.misused, misuse{setting, fmt.Sprintf(format, args...)})
}

// valid records that setting was given a value it takes, undoing an
// earlier mistake.
func (c *Config) valid(setting string) {
	c.misused = slices.DeleteFunc(c.misused, func(m misuse) bool { return m.setting == setting })
}

// nilFunc records that option was given a nil function for setting, which
// Must and MustNew refuse: the default it would leave in place (the peer
// address as the key, say) is seldom what a function that came out nil was
// meant to be.
func (c *Config) nilFunc(setting, option string) {
	c.mistake(setting, "%s(nil): a nil function (leave the option out for the default)", option)
}

// setFunc is what an option taking a function does: set runs it, or, for a
// nil function, records option's mistake of setting (see nilFunc).
func (c *Config) setFunc(isNil bool, setting, option string, set func()) {
	if isNil {
		c.nilFunc(setting, option)
		return
	}
	set()
	c.valid(setting)
}

// NilKey records that the key option named option (WithGinKey,
// WithEchoKey: the adapters' router-native ones) was given a nil function,
// as WithKey(nil) does: Must and MustNew refuse it unless a key function
// is given later.
func (c *Config) NilKey(option string) { c.nilFunc("Key", option) }

// limiterOption names an option that configures the limiter an algorithm
// constructor builds, and what does the same for a limiter built by hand.
type limiterOption struct{ name, instead string }

// limiterOnly records that the option name, which only the limiter of an
// algorithm constructor takes, was set (the first such option is named).
func (c *Config) limiterOnly(name, instead string) {
	if c.forLimiter.name == "" {
		c.forLimiter = limiterOption{name, instead}
	}
}

// Option sets a field of Config. Every adapter's Option has this underlying
// type, so the setters (options.go, and WithContextKey for the router-native
// key options) are its options.
type Option = func(*Config)

// WithContextKey sets a key function that reads the router's own context;
// adapters wrap it to their context type.
func WithContextKey(f func(r *http.Request, rc any) (string, error)) Option {
	return func(c *Config) {
		c.setFunc(f == nil, "Key", "WithContextKey", func() { c.Key, c.customKey = f, true })
	}
}

// Flow runs the request flow of one middleware. It is safe for concurrent use.
type Flow struct {
	cfg      Config
	limiter  *core.Limiter
	peer     keyfunc.Func // the fallback key: the peer's, without RemoteIP's warning (see peerkey)
	policies policyCache  // RateLimit-Policy values by rules
	errors   errorLog     // the default error handler
	leaky    bool         // limiter has a LeakyBucket rule (see heldRetry)
}

// policy returns the RateLimit-Policy value of res's rules, formatted once
// per rule set (see policyCache). A Result without rules (a failure mode's)
// gets "", formatted from the Result.
func (f *Flow) policy(res core.Result) string {
	if len(res.Rules) == 0 {
		return ""
	}
	return f.policies.get(res.Rules)
}

// New returns the flow of limiter l (which may be nil when a limiter
// function is set). It never panics: a nil l without a limiter function
// reports ErrNoLimiter per request (the adapters use MustNew instead).
func New[O ~func(*Config)](l *core.Limiter, opts []O) *Flow {
	peer := keyfunc.RemoteIP()
	f := &Flow{limiter: l, leaky: l != nil && holds(l.Rules()), peer: peerkey.Quiet, cfg: Config{
		Key:     func(r *http.Request, _ any) (string, error) { return peer(r) },
		Deny:    DenyPlain,
		Timeout: defaultTimeout,
		MaxHold: DefaultMaxHold,
		Sleep:   ctxsleep.Sleep,
	}}
	f.errors.now = time.Now
	f.cfg.OnError = f.errors.log
	for _, o := range opts {
		if o != nil {
			o(&f.cfg)
		}
	}
	return f
}

// MustNew is New for the adapters' New: it panics, with a message that
// starts with where (such as "ginlimit.New"), when it is given nothing to
// decide with, a nil l and no limiter function. Such a middleware would
// serve every request unlimited and report an error for each.
//
// It panics too on an option that cannot apply to a limiter built already:
// one that configures the limiter an algorithm constructor builds
// (WithTimeout, WithPrefix, WithDenyCache, WithLimiterOptions), the
// failure mode core.FailLocal (a built limiter cannot be given a twin),
// WithMaxHold when l has no LeakyBucket rule (and no limiter function may
// choose another limiter); and on what mustBeValid refuses.
func MustNew[O ~func(*Config)](where string, l *core.Limiter, opts []O) *Flow {
	f := New[O](l, opts)
	c := &f.cfg
	if l == nil && c.LimiterFor == nil {
		panic(where + ": nil limiter and no WithLimiterFunc")
	}
	c.mustBeValid(where)
	if o := c.forLimiter; o.name != "" {
		panic(fmt.Sprintf("%s: %s configures the limiter an algorithm constructor builds, not the one given to New: use %s on that limiter", where, o.name, o.instead))
	}
	if c.FailureMode == core.FailLocal {
		panic(where + ": WithFailureMode(core.FailLocal) cannot apply to a limiter built already, which keeps its own failure mode (the middleware cannot give it an in-process twin): leave the option out, and build the limiter given to New with core.WithFailureMode(core.FailLocal)")
	}
	if c.holds && c.LimiterFor == nil && !holds(l.Rules()) {
		panic(where + ": WithMaxHold bounds how long a LeakyBucket request is held, and the limiter given to New has no LeakyBucket rule")
	}
	return f
}

// holds reports whether a rule of rules is a LeakyBucket, which holds
// requests.
func holds(rules []core.Rule) bool {
	for _, r := range rules {
		if r.Algorithm == core.LeakyBucket {
			return true
		}
	}
	return false
}

// mustBeValid panics, with a message that starts with where, on an option
// given what it cannot take, and on a setting of the flow's own that is
// not one of its kind's values (those of the limiter an algorithm
// constructor builds are checked by core.New as well).
func (c *Config) mustBeValid(where string) {
	if len(c.misused) > 0 {
		panic(where + ": " + c.misused[0].msg)
	}
	if c.Headers < HeadersDraft || c.Headers > HeadersNone {
		panic(fmt.Sprintf("%s: unknown header mode %d: WithHeaders takes HeadersDraft, HeadersLegacy, HeadersBoth or HeadersNone", where, c.Headers))
	}
	if c.FailureMode < core.FailOpen || c.FailureMode > core.FailLocal {
		panic(fmt.Sprintf("%s: unknown failure mode %d: WithFailureMode takes core.FailOpen, core.FailClosed or core.FailLocal", where, c.FailureMode))
	}
}

// Must returns the flow of a one-rule limiter of algorithm alg. It panics
// when the limit (or the client, the prefix, or the header mode) is
// invalid, on WithMaxHold for an algorithm other than LeakyBucket (and no
// limiter function, which may choose a LeakyBucket), and on what
// mustBeValid refuses, with a message that starts with where, such
// as "ginlimit.TokenBucket".
func Must[O ~func(*Config)](where string, client redis.UniversalClient, alg core.Algorithm, limit core.Limit, opts []O) *Flow {
	f := New[O](nil, opts)
	c := &f.cfg
	c.mustBeValid(where)
	if c.holds && c.LimiterFor == nil && alg != core.LeakyBucket {
		panic(fmt.Sprintf("%s: WithMaxHold bounds how long a LeakyBucket request is held; a %s limiter admits or denies at once", where, alg))
	}
	copts := []core.Option{
		core.WithTimeout(c.Timeout),
		core.WithFailureMode(c.FailureMode),
		core.WithMaxDelay(c.MaxHold),
		core.WithDenyCache(c.DenyCache),
	}
	if c.prefixed {
		copts = append(copts, core.WithPrefix(c.Prefix))
	}
	if c.Shadow {
		copts = append(copts, core.WithShadow())
	}
	copts = append(copts, c.LimiterOptions...)
	l, err := core.New(client, alg, limit, copts...)
	if err != nil {
		panic(fmt.Sprintf("%s(%s): %v", where, limit, err))
	}
	f.limiter, f.leaky = l, alg == core.LeakyBucket
	return f
}

// ReadsRoute reports whether a function of the user's sees the request
// during the decision: a key function (WithKey, or a router-native one),
// a cost, skip or limiter function, or a deny handler. Only then do the
// router adapters set r.Pattern to the matched route while they decide
// (for keyfunc.Route), since finding the route costs a router lookup per
// request under some routers; with the defaults (the peer address as the
// key) nothing reads it.
func (f *Flow) ReadsRoute() bool {
	c := &f.cfg
	return c.customKey || c.customDeny || c.Cost != nil || c.Skip != nil || c.LimiterFor != nil
}

// Admit runs the flow for r: it decides, sets the rate-limit headers on w,
// holds the request for a LeakyBucket delay, or writes the denial or failure
// response. It reports whether the next handler should be called; when it
// returns false the response has been written.
// rc is the router's own context, passed to router-native key functions.
func (f *Flow) Admit(w http.ResponseWriter, r *http.Request, rc any) bool {
	c := &f.cfg
	if c.Skip != nil && c.Skip(r) {
		return true
	}
	l := f.limiter
	if c.LimiterFor != nil {
		if pick := c.LimiterFor(r); pick != nil {
			l = pick
		}
	}
	if l == nil {
		return f.fail(w, r, ErrNoLimiter, false)
	}
	key, ok := f.key(w, r, rc)
	if !ok {
		return false
	}
	n := 1
	if c.Cost != nil {
		n = max(c.Cost(r), 1)
	}
	// The limiter bounds the decision by its own timeout (the algorithm
	// constructors set it from WithTimeout) and, past it, decides by its
	// failure mode; a stuck Redis costs a request at most that long.
	res, err := l.AllowN(r.Context(), key, n)
	if c.Shadow {
		// Never deny, never hold, tell the client nothing; the limiter's
		// observer counts what it would have denied.
		if err != nil && r.Context().Err() == nil {
			c.OnError(r, &prefixError{"sluice: rate-limit decision failed (shadow mode): ", err})
		}
		return true
	}
	if err != nil {
		if next, handled := f.decisionError(w, r, res, err, n); handled {
			return next
		}
	}
	if res.Allowed && res.Delay > c.MaxHold {
		res = overDelay(res, c.MaxHold)
	} else if !res.Allowed {
		res = f.heldRetry(res, l)
	}
	if res.ShadowDenied {
		// A limiter built with core.WithShadow: served, and, as in this
		// package's shadow mode, nothing told to the client (headers saying
		// r=0 would make it back off from a limit nobody enforces).
		return true
	}
	var now time.Time // read only for X-RateLimit-Reset, the only field in absolute time
	if c.Headers == HeadersLegacy || c.Headers == HeadersBoth {
		now = time.Now()
	}
	renamed := setHeaders(w.Header(), c.Headers, res, f.policy(res), now)
	if !res.Allowed {
		if renamed != nil {
			res = renameRules(res, renamed) // the deny handler names them as the headers do
		}
		h := w.Header()
		h.Set(headerRetryAfter, retryAfter(h, RetryAfterSeconds(res)))
		c.Deny(w, r, res)
		return false
	}
	if res.Delay > 0 {
		return f.hold(w, r, res.Delay)
	}
	return true
}

// decisionError handles err, the error of r's decision res (of cost n): it
// reports handled, with whether the next handler runs, when the request is
// answered here (its client gone or its deadline passed, a cost no rule
// admits, nothing decided: by the failure mode); when the in-process twin
// decided (FailLocal), it reports the error and leaves res to Admit.
func (f *Flow) decisionError(w http.ResponseWriter, r *http.Request, res core.Result, err error, n int) (next, handled bool) {
	c := &f.cfg
	switch ctxErr := r.Context().Err(); {
	case errors.Is(ctxErr, context.Canceled):
		return gone(w), true
	case ctxErr != nil:
		// The request's own deadline (set by a middleware before this
		// one) passed while Redis decided: too late to serve it.
		return f.late(w, r, fmt.Errorf("sluice: the request's deadline passed during the rate-limit decision: %w", err)), true
	}
	if errors.Is(err, core.ErrCostExceedsLimit) {
		c.OnError(r, err)
		if res.Allowed {
			return true, true // a limiter built with core.WithShadow never denies
		}
		http.Error(w, fmt.Sprintf("request cost %d exceeds the rate limit", n), http.StatusRequestEntityTooLarge)
		return false, true
	}
	err = &prefixError{"sluice: rate-limit decision failed: ", err}
	if res.Rules == nil {
		// Nothing decided: the failure mode does. (A limiter with
		// FailLocal decides with its in-process twin and fills in
		// Rules; that decision stands.) A limiter built with
		// FailClosed denies, so it fails closed here too.
		return f.fail(w, r, err, !res.Allowed), true
	}
	c.OnError(r, err)
	return false, false
}

// hold holds r, admitted with a LeakyBucket delay, until its turn, and
// reports whether the next handler runs: not when its client goes away
// meanwhile, nor when its own deadline comes first (answered at once
// when it comes before the turn: Redis has counted it, so its place in the
// bucket is taken whatever is done with it).
func (f *Flow) hold(w http.ResponseWriter, r *http.Request, delay time.Duration) bool {
	if d, ok := r.Context().Deadline(); ok && time.Until(d) < delay {
		return f.late(w, r, fmt.Errorf("sluice: the request's deadline comes before its turn, %s from now", delay))
	}
	if err := f.cfg.Sleep(r.Context(), delay); err != nil {
		if errors.Is(err, context.Canceled) {
			return gone(w) // the client gave up while held
		}
		return f.late(w, r, fmt.Errorf("sluice: the request's deadline passed while it waited its turn: %w", err))
	}
	return true
}

// statusClientClosed is the status of a request whose client went
// away before it was decided or while it was held: not a status of
// RFC 9110, but the one access logs and proxies know for it (nginx's 499).
const statusClientClosed = 499

// gone answers a request whose client has gone (its context canceled) with
// statusClientClosed and no body, reporting nothing: nobody reads
// the answer, but writing nothing would leave net/http, and the loggers of
// the routers, an empty 200, a request served that was not.
func gone(w http.ResponseWriter) bool {
	w.WriteHeader(statusClientClosed)
	return false
}

// late answers 503 to a request whose own deadline ends before it can be
// served (set by a middleware before this one, such as a timeout), and
// reports err: writing nothing would leave an empty 200.
func (f *Flow) late(w http.ResponseWriter, r *http.Request, err error) bool {
	f.cfg.OnError(r, lateError{err})
	plainError(w, bodyLate, http.StatusServiceUnavailable)
	return false
}

// key returns the key of r, or writes the rejection and returns false.
func (f *Flow) key(w http.ResponseWriter, r *http.Request, rc any) (string, bool) {
	c := &f.cfg
	key, err := c.Key(r, rc)
	if err == nil && key != "" {
		return key, true
	}
	if err == nil {
		err = errEmptyKey
	}
	c.OnError(r, &keyError{err})
	if c.KeyErrorReject && !c.Shadow { // shadow mode never denies
		plainError(w, bodyBadKey, http.StatusBadRequest)
		return "", false
	}
	key, err = f.peer(r)
	if err != nil || key == "" {
		return unknownPeer, true
	}
	return key, true
}

// fail handles a failed decision by the failure mode: serve without
// rate-limit headers, or answer 503 when failing closed (or when closed
// says the limiter itself failed closed). In shadow mode, which never
// denies, it only reports.
func (f *Flow) fail(w http.ResponseWriter, r *http.Request, err error, closed bool) bool {
	f.cfg.OnError(r, err)
	if f.cfg.Shadow {
		return true
	}
	if f.cfg.FailureMode == core.FailClosed || closed {
		plainError(w, bodyUnavailable, http.StatusServiceUnavailable)
		return false
	}
	return true
}

// heldRetry makes a denial's RetryAfter that of a retry the middleware
// will not hold past MaxHold. A LeakyBucket rule that denies (its queue
// full) says when a place frees, and one that admits while another rule
// denies says nothing, but a request let in waits for the queue ahead of
// it, ResetAfter as the denial finds it: held longer than MaxHold it would
// be denied after its place was taken (see overDelay). Such a rule then
// denies too, until its queue is short enough. The algorithm constructors'
// limiters, built with core.WithMaxDelay, say so already; a limiter given
// to New may not. The deny handler then sees such a rule as denying. The
// flow's own limiter is asked for its rules only when it has a LeakyBucket
// rule; one from LimiterFor is asked at each such denial. res.Rules[i] is
// the limiter's rule i (Result.Rules is in the policy's order).
func (f *Flow) heldRetry(res core.Result, l *core.Limiter) core.Result {
	maxHold := f.cfg.MaxHold.Truncate(time.Microsecond) // Redis's tick
	var rules []core.Rule
	copied := false
	for i := range res.Rules {
		rr := res.Rules[i]
		wait := rr.ResetAfter - maxHold
		if wait <= rr.RetryAfter {
			continue
		}
		if rules == nil {
			if l == f.limiter && !f.leaky {
				return res
			}
			if rules = l.Rules(); !holds(rules) {
				return res
			}
		}
		if i >= len(rules) || rules[i].Algorithm != core.LeakyBucket {
			continue
		}
		if !copied { // a copy, as overDelay makes: the Result core gave is left as it was
			res.Rules, copied = append([]core.RuleResult(nil), res.Rules...), true
		}
		res.Rules[i].Allowed, res.Rules[i].Remaining, res.Rules[i].RetryAfter = false, 0, wait
		res.Remaining = 0
		decidedBy(&res, i)
	}
	return res
}

// decidedBy names rule i of the denial res as its deciding rule when it
// waits longest, or as long as the rule named so far and comes before it,
// as core names ties. (A policy's rule names are unique: compilePolicy
// refuses duplicates.)
func decidedBy(res *core.Result, i int) {
	rr := &res.Rules[i]
	if rr.RetryAfter < res.RetryAfter {
		return
	}
	if rr.RetryAfter == res.RetryAfter {
		for j := range i {
			if res.Rules[j].Name == res.Rule {
				return
			}
		}
	}
	res.RetryAfter, res.Rule, res.Limit = rr.RetryAfter, rr.Name, rr.Limit
}

// overDelay turns an admission whose delay exceeds maxDelay into a denial.
// The places the request took in the bucket stay taken (the decision is
// already made in Redis): the same request fits within maxDelay once they
// have drained too, when the bucket's queue (ResetAfter, theirs included)
// is maxDelay long. Until then every request is held as long: Remaining
// is 0.
func overDelay(res core.Result, maxDelay time.Duration) core.Result {
	maxDelay = maxDelay.Truncate(time.Microsecond) // Redis's tick
	res.Allowed = false
	res.RetryAfter = 0
	res.Rules = append([]core.RuleResult(nil), res.Rules...)
	for i := range res.Rules {
		rr := &res.Rules[i]
		if rr.Delay <= maxDelay {
			continue
		}
		rr.Allowed, rr.Remaining = false, 0
		rr.RetryAfter = max(rr.ResetAfter, rr.Delay) - maxDelay
		decidedBy(&res, i)
		res.Remaining = 0
	}
	if res.RetryAfter == 0 { // no rule result carried the delay
		res.RetryAfter = res.Delay - maxDelay
	}
	res.Delay = 0
	return res
}
