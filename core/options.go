package core

import "time"

// Option configures a Limiter.
type Option func(*options)

type options struct {
	prefix      string
	timeout     time.Duration
	failure     FailureMode
	failures    int           // consecutive failures that make Redis unhealthy; 0 never
	maxBackoff  time.Duration // longest pause between health probes
	onHealth    func(Health, error)
	observer    func(Event)
	keyHash     hashKey // Event.KeyHash's key
	emptySecret bool    // WithKeyHashSecret(""): rejected
	shadow      bool
	maxDelay    time.Duration // LeakyBucket, when maxDelaySet; negative is rejected
	maxDelaySet bool
	denyCache   int // entries; 0: no cache
}

func defaultOptions() options {
	return options{
		prefix:     "sluice",
		timeout:    defaultTimeout,
		failure:    FailOpen,
		failures:   3,
		maxBackoff: 500 * time.Millisecond,
		keyHash:    processHashKey,
	}
}

// DefaultTimeout bounds each Redis call of a decision unless WithTimeout
// says otherwise. A decision on a healthy Redis on the same network takes
// well under a millisecond; 100ms leaves room for a busy server without
// letting a stuck one stall requests.
const DefaultTimeout = 100 * time.Millisecond

// defaultTimeout is DefaultTimeout, raised by the tests: they run Lua on
// miniredis under the race detector on shared machines, and assert
// decisions, not latency.
var defaultTimeout = DefaultTimeout

// WithPrefix sets the prefix of every Redis key the limiter writes (default
// "sluice"). It must not contain '{' or '}', which would break the hash tag
// that keeps a key's rules in one Redis Cluster slot.
func WithPrefix(prefix string) Option {
	return func(o *options) { o.prefix = prefix }
}

// WithTimeout bounds each Redis call of a decision (default DefaultTimeout);
// the caller's context can only shorten it. A call that runs out of time is
// a failure, decided by the FailureMode. Zero or negative means no bound of
// the limiter's own: only the context and the client's timeouts apply.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithFailureMode says how to decide when Redis cannot be asked (default
// FailOpen).
func WithFailureMode(m FailureMode) Option {
	return func(o *options) { o.failure = m }
}

// WithHealthCheck sets when Redis is taken for unhealthy: after failures
// consecutive failed decisions (default 3). While unhealthy the limiter
// stops sending decisions to Redis, decides them by its FailureMode at once,
// and probes Redis in the background, with pauses growing from 50ms up to
// maxBackoff (default 500ms), until it accepts a write (a SET of a
// short-lived key under the prefix): a Redis that answers PING but refuses
// writes (NOREPLICAS, READONLY, OOM) stays unhealthy. failures 0 turns
// this off: every decision then tries Redis. On a Redis Cluster each
// master is checked on its own: the decisions on a failing master's keys
// go to the FailureMode while the other masters' still go to Redis.
func WithHealthCheck(failures int, maxBackoff time.Duration) Option {
	return func(o *options) { o.failures, o.maxBackoff = failures, maxBackoff }
}

// WithHealthHook calls fn on every change of Redis health, with the error
// that made it unhealthy (nil when it recovers), one change at a time and
// in order. On a Redis Cluster it reports Unhealthy when a first master's
// check fails and Healthy when the last failing one recovers. fn runs on
// the goroutine of a caller whose decision made a change, or of the
// health probe, whichever is delivering changes at that moment (a change
// made while fn runs waits for it, and is told on the same goroutine). It
// must not block; it may use the limiter, even to decide on the Redis it
// is told about. fn must not panic: the changes queued behind a panic
// still reach fn, in order, and then the panic goes on up that goroutine,
// where a caller's HTTP server may recover it, and the probe's ends the
// program as any goroutine's panic does. Close ends the reports: a limiter
// closed while unhealthy tells fn nothing more (it has no breaker from
// then on, and Health reports Healthy), and a change still queued is
// dropped; only one already being handed to fn may reach it, once, after
// Close returns (Close cannot wait for fn, which may be what calls it).
func WithHealthHook(fn func(Health, error)) Option {
	return func(o *options) { o.onHealth = fn }
}

// WithKeyHashSecret keys Event.KeyHash with secret, so that every process
// (every instance of a service) given the same secret hashes a key alike,
// and logs of several instances can be matched by it. Without it, KeyHash
// is keyed by a secret drawn when the process starts: stable within the
// process only. Either way, a KeyHash tells nothing of its key to whoever
// does not hold the secret; keep secret where it is as private as the keys
// are (a client IP, a user id). An empty secret is an ErrInvalidConfig
// (NewLocal, which has no observer, ignores the option).
func WithKeyHashSecret(secret string) Option {
	k := secretHashKey(secret)
	return func(o *options) { o.keyHash, o.emptySecret = k, secret == "" }
}

// WithObserver calls fn after every AllowN (and so every attempt of WaitN)
// with what was decided and how long it took; see Event. fn runs on the
// caller's goroutine and must be cheap. Without an observer, nothing is
// measured or built.
func WithObserver(fn func(Event)) Option {
	return func(o *options) { o.observer = fn }
}

// WithShadow makes the limiter decide, count and report, but never deny: a
// request the rules would deny is admitted (Allowed true) and marked with
// Result.ShadowDenied, and observers see it as denied with Event.Shadow.
// Use it to roll out a new limit and watch what it would do. Admitted
// requests consume as usual, so the counts are the real ones. Nothing waits
// either: Delay is 0 and WaitN never sleeps (the Result.Rules of a decision
// keep each rule's own view, its Allowed and Delay, to show what it would
// have done). When Redis cannot be asked, the request is admitted whatever
// the FailureMode, the error returned; so is an AllowN whose cost is
// refused before Redis is asked (more than a rule can ever admit:
// ShadowDenied set, naming that rule; or below 1), counted nowhere, its
// Rules nil. WaitN still returns such a cost's error at once.
func WithShadow() Option {
	return func(o *options) { o.shadow = true }
}

// WithMaxDelay bounds the Delay of LeakyBucket rules: a request that would
// have to wait longer than d for the requests ahead of it is denied, and
// like every denial consumes nothing, so the queue never fills with
// requests that will not be served. RetryAfter then says when the wait
// will be short enough. Without it, the wait is bounded only by Burst
// (up to about Burst/Rate × Period). 0 admits only requests that need not
// wait at all; a negative d is a mistake that New reports as
// ErrInvalidConfig.
func WithMaxDelay(d time.Duration) Option {
	return func(o *options) { o.maxDelay, o.maxDelaySet = d, true }
}

// WithDenyCache lets the limiter answer repeated denials itself: once Redis
// denies n events for a key with RetryAfter d, requests of the same key and
// n or more events are denied in-process until d has passed, with
// RetryAfter and ResetAfter counting down. A flood on a key far above its
// limit then costs Redis one script per RetryAfter instead of one per
// request. size bounds the number of keys remembered (0, the default, turns
// the cache off).
//
// The cache is exact for the denied request: nothing but a Reset makes it
// admissible sooner. A larger request cannot fit sooner either; for it the
// countdown is a lower bound, and once it ends Redis answers. A smaller
// request always goes to Redis. What the cache cannot see is a Reset done
// through another Limiter value, in this process or another (this
// limiter's Reset clears its own entry), and the refill of the rules,
// whose Remaining it reports as at the denial (a rule that denied, once
// its own wait is over, with the denied cost left at least).
func WithDenyCache(size int) Option {
	return func(o *options) { o.denyCache = size }
}
