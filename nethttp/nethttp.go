// Package nethttp limits net/http handlers with sluice. It is the reference
// for the middleware of every router: chilimit, ginlimit and echolimit have
// the same constructors, options and behaviour, and only translate their
// router's context.
//
// Each constructor returns a func(http.Handler) http.Handler middleware:
//
//	mux := http.NewServeMux()
//	mux.Handle("GET /", home)
//	http.ListenAndServe(addr, nethttp.TokenBucket(rdb, core.PerSecond(10))(mux))
//
// The algorithm constructors (FixedWindow, SlidingWindowLog,
// SlidingWindowCounter, LeakyBucket, TokenBucket, GCRA) build a one-rule
// limiter and panic at once on an invalid limit, naming the problem; New
// takes any core.Limiter, such as a policy of several rules, and panics
// when it has nothing to decide with (a nil limiter and no
// WithLimiterFunc). Every constructor panics on an option that cannot
// apply where it is given (a nil function, WithMaxHold without a
// LeakyBucket, in New an option that only the algorithm constructors'
// limiter takes: see New). Nothing panics while serving.
//
// # The request flow
//
// For each request the middleware:
//
//  1. lets requests exempted by WithSkip through, untouched;
//  2. computes the key: by default keyfunc.RemoteIP(), the peer address of
//     the connection (IPv6 grouped by /64), so a spoofed X-Forwarded-For
//     changes nothing; WithKey chooses another. When the key function fails
//     the request is limited by its peer address instead and the error goes
//     to the error handler (WithKeyErrorReject answers 400 instead): a key
//     error never skips limiting;
//  3. decides in Redis, with the cost of WithCost, within WithTimeout;
//  4. sets the rate-limit headers (below) on the response;
//  5. calls the next handler, after holding the request for its delay under
//     LeakyBucket (at most WithMaxHold, and only while the client waits;
//     a longer delay is a denial), or answers 429 Too Many Requests with
//     Retry-After (WithDenyHandler, WithProblemDetails);
//  6. when Redis fails or is too slow, fails open by default: it serves the
//     request without rate-limit headers and reports the error to the error
//     handler (WithErrorHandler; the default logs with log/slog, the first
//     error of each kind and then at most one line per kind every 10s).
//     WithFailClosed answers 503 instead. A limiter built with
//     core.WithFailureMode(core.FailClosed) also answers 503, and one built
//     with core.FailLocal decides with its in-process twin, headers and all.
//
// # Headers
//
// Every limited response, allowed or denied, carries the fields of
// draft-ietf-httpapi-ratelimit-headers-10/11 (WithHeaders selects them, or
// the legacy X-RateLimit-* fields, or both, or none):
//
//	RateLimit-Policy: "gcra";q=100;w=60
//	RateLimit: "gcra";r=42;t=17
//
// RateLimit-Policy lists every rule of the limiter: its name (for a limiter
// built by an algorithm constructor, the algorithm's name, such as
// "token_bucket"), q its quota and w its window in seconds: Rate per
// Period, or, for a bucket whose Burst is larger than its Rate, Burst over
// the time the bucket takes to refill it (10/s with Burst 50 reads
// q=50;w=5). RateLimit gives, per rule, r the requests still admissible
// now, never more than q, and t the seconds until the rule admits again
// (when it denies) or until it is back to full (when it admits). The draft
// counts whole seconds: w and t are rounded up, and w is at least 1, so a
// limit of 5 per 500ms reads q=5;w=1. A 429 carries Retry-After in whole
// seconds, rounded up, at least 1, and never earlier than the t of a rule
// that denies.
//
// Stacked middlewares (a router-wide limit and a route's own) each add
// their rules to the two fields, one list each, so the client sees every
// limit that applies; a name already listed gets a suffix ("gcra-2", then
// "-3"), the same in both fields. Retry-After is the largest of theirs.
// The legacy X-RateLimit-* fields describe one rule only: the deciding one
// (the fewest requests remaining, or of a denial the longest wait), and of
// stacked middlewares the one that denies, or the one with fewer remaining.
//
// # Per-route limits
//
// Wrap the route's handler:
//
//	mux.Handle("POST /login", nethttp.FixedWindow(rdb, core.PerMinute(3))(login))
//
// Limiters with the same rules and key prefix share their counters on
// purpose (they are one limit across instances). Two routes each limited by
// FixedWindow(rdb, core.PerMinute(3)) and keyed by client IP therefore
// share one budget: give each its own WithPrefix, or key by route
// (RouteKey).
package nethttp

//go:generate go run ../internal/flow/adaptergen

import (
	"net/http"

	"github.com/sluicehq/sluice/internal/flow"
)

// middleware runs f for each request.
func middleware(f *flow.Flow) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if f.Admit(w, r, nil) {
				next.ServeHTTP(w, r)
			}
		})
	}
}
