package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrInvalidLimit is wrapped by New and NewPolicy for every bad
// configuration; the message names the problem.
var ErrInvalidLimit = errors.New("sluice: invalid limit")

// ErrCostExceedsLimit is returned by AllowN and WaitN when n is larger than
// some rule can ever admit at once. It is returned at once: such a request is
// never admissible, so retrying or waiting cannot help.
var ErrCostExceedsLimit = errors.New("sluice: cost exceeds limit")

// Option configures a Limiter.
type Option func(*options)

type options struct {
	prefix string
}

// WithPrefix sets the prefix of every Redis key the limiter writes (default
// "sluice"). It must not contain '{' or '}', which would break the hash tag
// that keeps a key's rules in one Redis Cluster slot.
func WithPrefix(prefix string) Option {
	return func(o *options) { o.prefix = prefix }
}

// Limiter decides whether events for a key are admitted, against one or more
// rules kept in Redis. It is safe for concurrent use by many goroutines and,
// through Redis, by many processes: limiters built with the same rules and
// prefix share their state on purpose.
//
// Use Allow or AllowN to decide a request and reject what is denied; use
// Wait or WaitN for work that should be delayed rather than rejected, such
// as background jobs. Peek reports the state without consuming, and Reset
// forgets a key.
type Limiter struct {
	client redis.UniversalClient
	rules  []compiledRule
	prefix string
	fp     string // fingerprint of the rules, part of every key
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
func NewPolicy(client redis.UniversalClient, rules []Rule, opts ...Option) (*Limiter, error) {
	o := options{prefix: "sluice"}
	for _, opt := range opts {
		opt(&o)
	}
	if client == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidLimit)
	}
	if o.prefix == "" {
		return nil, fmt.Errorf("%w: empty key prefix", ErrInvalidLimit)
	}
	if strings.ContainsAny(o.prefix, "{}") {
		return nil, fmt.Errorf("%w: key prefix %q contains '{' or '}'", ErrInvalidLimit, o.prefix)
	}
	compiled, err := compileRules(rules)
	if err != nil {
		return nil, err
	}
	return &Limiter{client: client, rules: compiled, prefix: o.prefix, fp: fingerprint(compiled)}, nil
}

// Rules returns the limiter's rules, with Burst filled in.
func (l *Limiter) Rules() []Rule {
	out := make([]Rule, len(l.rules))
	for i, r := range l.rules {
		out[i] = r.Rule
	}
	return out
}

// Allow reports whether one event for key is admitted now, and consumes it
// if so. It is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 1)
}

// checkCost validates n against every rule.
func (l *Limiter) checkCost(method string, n int) error {
	return checkCost(l.rules, method, n)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
