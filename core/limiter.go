package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrInvalidLimit is wrapped by New, NewPolicy and NewLocal for a rule
// whose Limit cannot be decided: a rate or period that is not positive, a
// negative burst, a burst other than the rate for a window algorithm, a
// period below 1ms or not a whole number of microseconds, or a limit too
// large to decide exactly. The message names the rule and the problem.
// Every other mistake is ErrInvalidConfig.
var ErrInvalidLimit = errors.New("sluice: invalid limit")

// ErrInvalidConfig is wrapped by New, NewPolicy and NewLocal for a mistake
// in what surrounds the limits: a nil client; an empty key prefix or one
// holding '{' or '}'; an unknown FailureMode; negative WithHealthCheck,
// WithDenyCache or WithMaxDelay values; an empty WithKeyHashSecret (New
// and NewPolicy; NewLocal ignores it); no rules; a rule with an empty or
// duplicate name; and a rule with an empty or unknown Algorithm (the limit
// of an unknown algorithm cannot be judged, so it is a configuration
// mistake, not a limit's). The message names the problem.
var ErrInvalidConfig = errors.New("sluice: invalid configuration")

// ErrCostExceedsLimit is returned by AllowN and WaitN when n is larger than
// some rule can ever admit at once. It is returned at once: such a request is
// never admissible, so retrying or waiting cannot help.
var ErrCostExceedsLimit = errors.New("sluice: cost exceeds limit")

// Limiter decides whether events for a key are admitted, against one or more
// rules kept in Redis. It is safe for concurrent use by many goroutines and,
// through Redis, by many processes: limiters built with the same rules and
// prefix share their state on purpose.
//
// Use Allow or AllowN to decide a request and reject what is denied; use
// Wait or WaitN for work that should be delayed rather than rejected, such
// as background jobs. Peek reports the state without consuming, and Reset
// forgets a key.
//
// When Redis cannot be asked, AllowN returns the error together with the
// decision of the limiter's FailureMode (FailOpen by default); after a few
// consecutive failures it stops asking Redis until a background probe finds
// it answering again (see WithHealthCheck).
type Limiter struct {
	rules  []compiledRule
	prefix string
	fp     string // fingerprint of the rules, part of every key
	opts   options
	health health
	// masters: on a Redis Cluster, a breaker per master beside health
	masters *masterHealth
	changes healthChanges // what the health hook is told (see healthChanges)
	local   *Local        // the twin, for FailLocal
	batch   *batcher
	denied  *denyCache // nil unless WithDenyCache

	suffixes []string // per rule: "}:<fingerprint>:<index>", the end of its Redis key
	probeKey string   // written by the health probe: see probe
}

// New returns a Limiter of one rule, named after the algorithm.
func New(client redis.UniversalClient, alg Algorithm, limit Limit, opts ...Option) (*Limiter, error) {
	return NewPolicy(client, []Rule{{Name: string(alg), Algorithm: alg, Limit: limit}}, opts...)
}

// NewPolicy returns a Limiter that decides all rules of a key in one atomic
// Redis call, all or nothing: when any rule denies, no rule consumes.
//
// The rules' names, algorithms and limits are fingerprinted into every key,
// so two limiters with different rules never share state, even for the same
// key and prefix. It also means that changing a limit starts its counters
// afresh.
//
// Given a *redis.Client, NewPolicy adds one hook to it (once per client,
// however many limiters share it) that passes every command through and
// notes failed dials, so that a decision timed out while Redis refused
// connections names that cause rather than only "context deadline
// exceeded".
func NewPolicy(client redis.UniversalClient, rules []Rule, opts ...Option) (*Limiter, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if isNilClient(client) {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidConfig)
	}
	if o.prefix == "" {
		return nil, fmt.Errorf("%w: empty key prefix", ErrInvalidConfig)
	}
	if strings.ContainsAny(o.prefix, "{}") {
		return nil, fmt.Errorf("%w: key prefix %q contains '{' or '}'", ErrInvalidConfig, o.prefix)
	}
	if o.failure < FailOpen || o.failure > FailLocal {
		return nil, fmt.Errorf("%w: unknown failure mode %d", ErrInvalidConfig, o.failure)
	}
	if o.failures < 0 {
		return nil, fmt.Errorf("%w: health check of %d failures: must not be negative (0 turns it off)", ErrInvalidConfig, o.failures)
	}
	if o.maxBackoff < 0 {
		return nil, fmt.Errorf("%w: health check backoff %s: must not be negative", ErrInvalidConfig, o.maxBackoff)
	}
	if o.emptySecret {
		return nil, fmt.Errorf("%w: WithKeyHashSecret: empty secret", ErrInvalidConfig)
	}
	if o.denyCache < 0 {
		return nil, fmt.Errorf("%w: deny cache of %d keys: must not be negative (0 turns it off)", ErrInvalidConfig, o.denyCache)
	}
	compiled, err := compilePolicy(rules, o)
	if err != nil {
		return nil, err
	}
	l := &Limiter{rules: compiled, prefix: o.prefix, fp: fingerprint(compiled), opts: o, batch: newBatcher(client, scriptFor(compiled), len(compiled), ruleArgs(compiled))}
	l.changes.fn = o.onHealth
	l.health = l.newHealth(l.probe, &l.changes)
	if l.batch.cluster != nil && o.failures > 0 {
		l.masters = &masterHealth{l: l, cluster: l.batch.cluster}
	}
	for i := range compiled {
		l.suffixes = append(l.suffixes, "}:"+l.fp+":"+strconv.Itoa(i))
	}
	// "#probe" is no stored key: those that begin with '#' are a hash.
	l.probeKey = o.prefix + ":{" + probeTag + "}:" + l.fp
	if o.denyCache > 0 {
		tick := int64(1)
		for i := range compiled {
			tick = max(tick, compiled[i].tick)
		}
		l.denied = newDenyCache(o.denyCache, time.Duration(tick)*time.Microsecond)
	}
	if o.failure == FailLocal {
		// Redis coming back does not clear it: see FailLocal.
		l.local = &Local{rules: compiled, keys: make(map[string][]localState), limit: DefaultLocalKeys}
	}
	return l, nil
}

// isNilClient reports whether client is nil, or a nil pointer of one of
// go-redis's clients in the interface.
func isNilClient(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case nil:
		return true
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}

// Rules returns the limiter's rules, with Burst filled in, in the policy's
// order, the order of Result.Rules.
func (l *Limiter) Rules() []Rule {
	out := make([]Rule, len(l.rules))
	for i, r := range l.rules {
		out[i] = r.Rule
	}
	return out
}

// Close stops the limiter's background work: the probe that, while Redis
// is taken for unhealthy, waits for it to answer again (and holds the
// limiter meanwhile), and the goroutines that send decisions to Redis and
// wait between batches; from then on, each of those ends as soon as it has
// nothing to send. It does not close the Redis client, which is the
// caller's. A closed limiter still decides, always by asking Redis (the
// failure mode still decides each call that fails), with no breaker: its
// Health is Healthy, and its health hook is told nothing more (but for a
// change already being handed to it, which may reach it once after Close
// returns).
// Limiters built and dropped at run time (one per tenant, say) should be
// closed; one that lives as long as the process need not be. Close may be
// called more than once.
func (l *Limiter) Close() error {
	l.changes.close()
	l.health.close()
	if l.masters != nil {
		l.masters.close()
	}
	l.batch.close()
	return nil
}

// Health reports whether decisions currently go to Redis. On a Redis
// Cluster it is Unhealthy while the decisions of any master go to the
// failure mode (each master has a health check of its own).
func (l *Limiter) Health() Health {
	if l.health.unhealthy() || l.masters != nil && l.masters.unhealthy() {
		return Unhealthy
	}
	return Healthy
}

// newHealth returns a breaker of the limiter's health check settings.
func (l *Limiter) newHealth(probe func(context.Context) error, changes changeReporter) health {
	return health{
		threshold:  l.opts.failures,
		maxBackoff: l.opts.maxBackoff,
		changes:    changes,
		probe:      probe,
		stop:       make(chan struct{}),
	}
}

// Allow reports whether one event for key is admitted now, and consumes it
// if so. It is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN reports whether n events for key are admitted now and, if so,
// consumes them under every rule. When any rule denies, nothing is consumed.
//
// n must be positive; n larger than some rule can ever admit at once returns
// ErrCostExceedsLimit without asking Redis.
//
// When Redis cannot be asked (an error, the timeout, or Redis taken for
// unhealthy), AllowN returns the error and, with it, the FailureMode's
// decision: Allowed for FailOpen, denied for FailClosed, the in-process
// twin's Result for FailLocal. A decision that ctx itself ends (canceled,
// or past its own deadline, before or while Redis is asked) is not
// admitted, whatever the failure mode (in shadow mode admitted, as on
// every failure), and nothing is taken from the twin: to bound how long a
// decision may take, use WithTimeout, after which the failure mode
// decides.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (Result, error) {
	if err := checkCost(l.rules, "AllowN", n); err != nil {
		var res Result
		if l.opts.shadow {
			// Never denied, a cost refused before Redis is asked included:
			// admitted, the error returned, as on any failure, naming the
			// rule that can never admit it (as the error does), if any.
			res = l.undecided(true)
			if i := exceeded(l.rules, n); i >= 0 {
				res.Limit, res.Rule, res.ShadowDenied = l.rules[i].Limit, l.rules[i].Name, true
			}
		}
		l.observe(Event{Outcome: OutcomeError, Allowed: res.Allowed, Shadow: res.ShadowDenied, Err: err}, key, n, time.Now())
		return res, err
	}
	var start time.Time
	if l.opts.observer != nil || l.denied != nil {
		start = time.Now()
	}
	var resets uint64
	if l.denied != nil {
		if res, ok := l.denied.get(key, n, start); ok {
			l.observe(Event{Outcome: OutcomeDenied, Rule: res.Rule, Cached: true}, key, n, start)
			return res, nil
		}
		resets = l.denied.resets.Load()
	}
	res, err := l.decide(ctx, key, true, n)
	if l.denied != nil && err == nil && !res.Allowed && !l.opts.shadow {
		l.denied.put(key, n, res, start, resets)
	}
	res, shadow := l.shadowed(res)
	if l.opts.observer != nil {
		ev := Event{Allowed: res.Allowed, Shadow: shadow, Rule: res.Rule, Err: err}
		switch {
		case err != nil && res.Rules != nil:
			ev.Outcome = OutcomeFallback // the twin decided
		case err != nil:
			ev.Outcome = OutcomeError
		case res.Allowed && !shadow:
			ev.Outcome = OutcomeAllowed
		default:
			ev.Outcome = OutcomeDenied
		}
		l.observe(ev, key, n, start)
	}
	return res, err
}

// observe completes ev and hands it to the observer, if any.
func (l *Limiter) observe(ev Event, key string, n int, start time.Time) {
	if l.opts.observer == nil {
		return
	}
	ev.KeyHash, ev.N, ev.Latency = l.opts.keyHash.sum(key), n, time.Since(start)
	l.opts.observer(ev)
}

// shadowed is res as shadow mode answers it (WithShadow): never a denial
// nor a wait, not even when Redis cannot be asked and the failure mode
// would deny (the error is still returned). shadow reports a denial of
// the rules turned into an admission.
func (l *Limiter) shadowed(res Result) (_ Result, shadow bool) {
	if !l.opts.shadow {
		return res, false
	}
	res.Delay = 0
	if !res.Allowed {
		// (a denial of the rules, Redis's or the twin's; not of a failure
		// mode, which decides nothing: Rules nil)
		res.Allowed, res.ShadowDenied, res.RetryAfter = true, res.Rules != nil, 0
	}
	return res, res.ShadowDenied
}

// Peek reports what Allow would decide for key right now, without changing
// anything in Redis. Remaining counts the events admissible now (the peeked
// one is not taken off); RetryAfter, when not allowed, is the time until one
// event would be. A denial the deny cache holds (WithDenyCache) answers it
// as it answers Allow, without asking Redis. When Redis cannot be asked,
// Peek returns the error with what Allow would answer then: the twin's
// view with FailLocal, otherwise the failure mode's (Allowed under
// FailOpen, Rules nil). In shadow mode it answers as Allow
// does: admitted, with ShadowDenied set when the rules would deny.
func (l *Limiter) Peek(ctx context.Context, key string) (Result, error) {
	if l.denied != nil {
		// A denial Redis made, cached: the answer Allow would give now,
		// when Redis cannot be asked too.
		if res, ok := l.denied.get(key, 1, time.Now()); ok {
			res, _ = l.shadowed(res)
			return res, nil
		}
	}
	res, err := l.decide(ctx, key, false, 1)
	res, _ = l.shadowed(res)
	return res, err
}

// Reset forgets key under every rule, as if it had never been seen. When it
// returns an error because its context ended or its timeout passed, the key
// may or may not be forgotten: a DEL already sent still runs in Redis.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if l.denied != nil {
		l.denied.forget(key)
	}
	if l.local != nil {
		l.local.Reset(key)
	}
	// A DEL or a probe's SET is answered as soon as its own pipeline returns, while
	// its batch's scripts are still out: its call may still be read there
	// (see exec), so it is not put back in the pool. Both are rare.
	c := getCall(callDel)
	stored := storedKey(key)
	c.keys = l.appendKeys(c.keys, stored)
	c.slot = clusterSlot(stored) // on a cluster, its master's share (see shareOut)
	_, err := l.batch.do(ctx, l.opts.timeout, c)
	if l.denied != nil {
		// Again: a denial decided before the DEL ran (a decision sent
		// while it was queued) must not outlive the Reset in the cache.
		l.denied.forget(key)
	}
	if err != nil {
		return err
	}
	return c.err
}

// probe is the health probe: a write of what decisions write, a SET with
// a TTL (of one second) under the limiter's prefix, sent through the
// batcher so that its wait is bounded like a decision's (a PING or a SET
// sent on the client directly could hang on a dead pooled connection for
// the client's ReadTimeout). A PING alone is answered by a Redis that
// refuses every admission: a replica (READONLY), a master short of
// replicas under min-replicas-to-write (NOREPLICAS), one out of memory
// under noeviction (OOM). On a Cluster the write reaches one node only,
// that of the probe key's slot.
func (l *Limiter) probe(ctx context.Context) error {
	return l.probeAt(ctx, l.probeKey, clusterSlot(probeTag))
}

// probeAt is a probe writing key, of slot: the limiter's probe key, or a
// cluster master's (see masterHealth).
func (l *Limiter) probeAt(ctx context.Context, key string, slot int) error {
	c := getCall(callProbe) // not put back: see Reset
	c.keys = append(c.keys[:0], keyArg{b: []byte(key)})
	c.slot = slot
	_, err := l.batch.do(ctx, 0, c)
	if err == nil {
		err = c.err
	}
	if err != nil {
		l.batch.reloadSlots() // the probe key's master may be down: see reloadSlots
	}
	return err
}

// probeTag is the hash tag of the limiter's probe key.
const probeTag = "#probe"

// decide asks Redis, or the failure mode when Redis cannot be asked (see
// failed).
func (l *Limiter) decide(ctx context.Context, key string, consume bool, n int) (Result, error) {
	if l.health.unhealthy() {
		return l.failed(ctx, key, consume, n, l.health.err())
	}
	if l.masters != nil {
		if h := l.masters.openFor(key); h != nil {
			return l.failed(ctx, key, consume, n, h.err())
		}
	}
	res, h, err := l.run(ctx, key, consume, n)
	if err == nil {
		h.success()
		if h != &l.health {
			// a master's: any answer ends a run of failures of the
			// limiter's own too (those of decisions with no master named)
			l.health.success()
		}
		if l.local != nil {
			l.local.tidy()
		}
		return res, nil
	}
	// Only the limiter's own timeout, or an error, says something about
	// Redis: a caller that gave up (its context canceled or past its own
	// deadline) does not, or one impatient caller could take Redis out of
	// service for everyone. (The deadline is checked, not only ctx.Err: an
	// answer cut short at that deadline can arrive a moment before the
	// context's own timer has ended it.)
	if !gaveUp(ctx) && availability(err) {
		h.failure(err)
		l.batch.reloadSlots()
	}
	return l.failed(ctx, key, consume, n, err)
}
