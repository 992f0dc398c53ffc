package flow

import (
	"errors"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// This file is the one source of the middleware options: every exported
// declaration below, doc comment included, is re-exported word for word by
// nethttp, chilimit, ginlimit and echolimit in their generated options.go
// (go run ./internal/flow/adaptergen). Edit the docs here, then run
// go generate ./...; what only the flow uses lives in flow.go.

// Defaults.
const (
	// DefaultTimeout is the decision timeout (see WithTimeout): core's.
	DefaultTimeout = core.DefaultTimeout
	// DefaultMaxHold bounds how long a LeakyBucket request is held (see WithMaxHold).
	DefaultMaxHold = 5 * time.Second
)

// ErrKey is wrapped by the error reported to the error handler when the key
// function fails or returns an empty key.
var ErrKey = errors.New("sluice: no rate-limit key")

// ErrNoLimiter is reported when neither New's limiter nor the limiter
// function gives a limiter for a request; the failure mode then applies.
var ErrNoLimiter = errors.New("sluice: no limiter for this request")

// HeaderMode selects the rate-limit headers of limited responses.
type HeaderMode int

// The header modes of WithHeaders. Retry-After goes on every 429 whatever
// the mode.
const (
	// HeadersDraft writes RateLimit-Policy and RateLimit as
	// draft-ietf-httpapi-ratelimit-headers-10/11 writes them. The default.
	HeadersDraft HeaderMode = iota
	// HeadersLegacy writes X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (Unix epoch seconds) of the deciding rule;
	// X-RateLimit-Limit is its q in RateLimit-Policy, Remaining at most that.
	HeadersLegacy
	// HeadersBoth writes the draft and the legacy headers.
	HeadersBoth
	// HeadersNone writes no rate-limit headers.
	HeadersNone
)

// WithKey sets who is limited (default: keyfunc.RemoteIP(), the peer
// address of the connection, IPv6 grouped by /64).
//
// When the key function fails or returns "", the request is limited by
// the peer address instead and the error, wrapping ErrKey, goes to the
// error handler: limiting is never skipped. WithKeyErrorReject answers
// 400 instead.
//
// A nil f panics at construction.
func WithKey(f keyfunc.Func) Option {
	return func(c *Config) {
		c.setFunc(f == nil, "Key", "WithKey", func() {
			c.Key = func(r *http.Request, _ any) (string, error) { return f(r) }
			c.customKey = true
		})
	}
}

// WithKeyErrorReject answers 400 Bad Request when the key function fails,
// instead of falling back to the peer address.
func WithKeyErrorReject() Option { return func(c *Config) { c.KeyErrorReject = true } }

// WithCost sets how many events a request costs (default 1). Costs below 1
// count as 1. A cost larger than a rule can ever admit at once is answered
// 413 and reported to the error handler (it wraps core.ErrCostExceedsLimit);
// in shadow mode (this package's or a core.WithShadow limiter's) it is
// served and reported.
//
// A nil f panics at construction.
func WithCost(f func(*http.Request) int) Option {
	return func(c *Config) {
		c.setFunc(f == nil, "Cost", "WithCost", func() { c.Cost = f })
	}
}

// WithSkip exempts the requests for which f returns true: they are served
// without a decision and without rate-limit headers.
//
// A nil f panics at construction.
func WithSkip(f func(*http.Request) bool) Option {
	return func(c *Config) {
		c.setFunc(f == nil, "Skip", "WithSkip", func() { c.Skip = f })
	}
}

// WithDenyHandler sets the response to a denied request. The rate-limit
// headers and Retry-After are already set when f is called; f writes the
// status and the body. The default answers 429 with a text/plain body.
//
// A nil f panics at construction.
func WithDenyHandler(f func(w http.ResponseWriter, r *http.Request, res core.Result)) Option {
	return func(c *Config) {
		c.setFunc(f == nil, "Deny", "WithDenyHandler", func() { c.Deny, c.customDeny = f, true })
	}
}

// WithProblemDetails answers denials with 429 and an RFC 9457
// application/problem+json body whose "violated-policies" member lists the
// names of the rules that denied.
func WithProblemDetails() Option {
	return func(c *Config) { c.Deny, c.customDeny = DenyProblem, false; c.valid("Deny") }
}

// WithHeaders selects the rate-limit headers (default HeadersDraft). A
// mode other than the four panics at construction.
func WithHeaders(m HeaderMode) Option { return func(c *Config) { c.Headers = m } }

// WithFailClosed answers 503 Service Unavailable when a decision fails
// (Redis unreachable, timeout). It is WithFailureMode(core.FailClosed).
func WithFailClosed() Option { return WithFailureMode(core.FailClosed) }

// WithFailureMode says what happens when Redis cannot decide (unreachable,
// past the timeout, or taken for unhealthy after repeated failures; see
// core.WithHealthCheck):
//
//   - core.FailOpen (the default) serves the request without rate-limit
//     headers;
//   - core.FailClosed answers 503 Service Unavailable;
//   - core.FailLocal decides with the limiter's in-process twin: each
//     instance enforces the limit on its own (N instances admit up to N
//     times the limit between them), headers included.
//
// Every failure goes to the error handler. The algorithm constructors build
// their limiter with this mode. A limiter given to New keeps its own
// (core.WithFailureMode): built with core.FailLocal, it decides with its
// twin; built with core.FailClosed, the middleware answers 503; built with
// core.FailOpen, this option decides: core.FailClosed answers 503,
// core.FailOpen serves the request without rate-limit headers. New panics
// on core.FailLocal, which a built limiter cannot be given afterwards
// (build it with core.WithFailureMode(core.FailLocal)), and every
// constructor on a mode other than these three.
func WithFailureMode(m core.FailureMode) Option { return func(c *Config) { c.FailureMode = m } }

// WithDenyCache lets the limiter an algorithm constructor builds answer
// repeated denials itself: it is core.WithDenyCache, default included (0,
// no cache). Once Redis denies a client with Retry-After d, that client's
// further requests are denied in-process until d has passed, with the same
// headers counting down, so a client hammering far above its limit costs
// Redis one script per d instead of one per request. size bounds the keys
// remembered; a negative size panics at construction.
//
// Turn it on for endpoints that take floods. The cached answer is the one
// Redis would give, except after a Reset made through another limiter (an
// admin endpoint on another instance, an operator's tool): this instance
// goes on denying until d has passed. That is why it is off by default.
//
// It configures the limiter an algorithm constructor builds: New panics
// when given it (build the limiter given to New with core.WithDenyCache).
func WithDenyCache(size int) Option {
	return func(c *Config) { c.DenyCache = size; c.limiterOnly("WithDenyCache", "core.WithDenyCache") }
}

// WithShadow decides, counts and reports, but never denies: for rolling out
// a new limit. Requests the limit would deny are served, and so are those
// WithKeyErrorReject or a failing-closed missing limiter would refuse (the
// error is reported); no rate-limit headers are written, so clients see
// nothing of the limit yet. Observers (core.WithObserver, through
// WithLimiterOptions) see the would-be denials with Event.Shadow set; with
// New, they do so only when the limiter was built with core.WithShadow.
func WithShadow() Option { return func(c *Config) { c.Shadow = true } }

// WithLimiterOptions passes core options to the limiter an algorithm
// constructor builds, after the ones the middleware sets: an observer
// (core.WithObserver), a health hook (core.WithHealthHook), the health
// check (core.WithHealthCheck).
//
// It configures the limiter an algorithm constructor builds: New panics
// when given it (the limiter given to New is already built, so give these
// options to core.New or core.NewPolicy instead).
func WithLimiterOptions(opts ...core.Option) Option {
	return func(c *Config) {
		c.LimiterOptions = append(c.LimiterOptions, opts...)
		c.limiterOnly("WithLimiterOptions", "core.New or core.NewPolicy")
	}
}

// WithErrorHandler sets the hook that receives decision errors (Redis
// failures, timeouts) and key errors (wrapping ErrKey), each as it
// happens. f must not write the response.
//
// The default logs with log/slog at level ERROR, without flooding the log
// when every request fails (an outage, anonymous requests keyed by user):
// the first error of each kind (a failed decision, a key error, a request
// past its deadline, a cost over the limit, no limiter) at once, then at
// most one line per kind every 10 seconds, whose "suppressed" attribute
// counts the errors of that kind left out since the line before. A line
// names the error, its kind and the request's method and path (not its
// query; a key error quotes up to 40 bytes of the header value it could
// not read): where paths carry secrets (a reset token), log with a handler
// of your own. Under Chi, Gin and Echo, r.Pattern holds the matched route
// in the handler only when another function of yours reads the request
// (a key, cost, skip or limiter function, a deny handler): finding the
// route costs every request, and errors are few.
//
// A nil f panics at construction.
func WithErrorHandler(f func(r *http.Request, err error)) Option {
	return func(c *Config) {
		c.setFunc(f == nil, "OnError", "WithErrorHandler", func() { c.OnError = f })
	}
}

// WithTimeout bounds each decision, so that a slow or stuck Redis never
// stalls a request (default DefaultTimeout, 100ms). The limiter that an
// algorithm constructor builds waits for Redis at most d, whatever the
// Redis client's own timeouts, then the failure mode decides
// (WithFailureMode). It means what core.WithTimeout means: d <= 0 is no
// bound of the limiter's own (only the request's context and the client's
// timeouts apply).
//
// It configures the limiter an algorithm constructor builds: New panics
// when given it (the limiter given to New bounds its decisions by its own
// core.WithTimeout; core's default is the same).
func WithTimeout(d time.Duration) Option {
	return func(c *Config) { c.Timeout = d; c.limiterOnly("WithTimeout", "core.WithTimeout") }
}

// WithMaxHold bounds how long the middleware holds a LeakyBucket request
// before it proceeds (default DefaultMaxHold, 5s); 0 holds none, and a
// negative d panics at construction, as WithMaxHold does where no
// LeakyBucket can decide (another algorithm's constructor, or New of a
// limiter without a LeakyBucket rule, without a limiter function). The
// request context bounds the hold too: a client that goes away is not
// served, and is answered 499 (client closed request) for the access log. A request that would be held longer is denied (429):
//
//   - the algorithm constructors build their limiter with
//     core.WithMaxDelay(d), so Redis denies it and it takes no place in the
//     bucket;
//   - a limiter given to New keeps its own core.WithMaxDelay (none by
//     default), and the middleware denies a longer hold after the
//     decision, when the place is already taken (Retry-After accounts for
//     it): build LeakyBucket limiters for New with core.WithMaxDelay.
//
// It is named for what the HTTP layer does; core.WithMaxDelay is the
// limiter's bound, which has no default.
func WithMaxHold(d time.Duration) Option {
	return func(c *Config) {
		c.MaxHold, c.holds = max(d, 0), true
		if d < 0 {
			c.mistake("MaxHold", "WithMaxHold(%v): a negative hold (0 holds none)", d)
		} else {
			c.valid("MaxHold")
		}
	}
}

// WithLimiterFunc chooses the limiter of each request, for example by plan
// tier. When f returns nil the limiter given to the constructor is used;
// when there is none either, the request fails with ErrNoLimiter.
//
// f may build limiters at run time (one per tenant, say) and drop them:
// the middleware keeps nothing of a limiter once its request is answered,
// so a dropped limiter (closed with Close) is collected. It remembers the
// RateLimit-Policy values of the last 16 rule sets it has seen; with more
// rule sets than that in turn, each request formats its own.
//
// A nil f panics at construction.
func WithLimiterFunc(f func(*http.Request) *core.Limiter) Option {
	return func(c *Config) {
		c.setFunc(f == nil, "LimiterFor", "WithLimiterFunc", func() { c.LimiterFor = f })
	}
}

// WithPrefix sets the Redis key prefix of the limiter that an algorithm
// constructor builds (default "sluice").
//
// It configures the limiter an algorithm constructor builds: New panics
// when given it (the limiter given to New keeps the prefix it was built
// with, core.WithPrefix).
func WithPrefix(prefix string) Option {
	return func(c *Config) {
		c.Prefix, c.prefixed = prefix, true
		c.limiterOnly("WithPrefix", "core.WithPrefix")
	}
}
