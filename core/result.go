package core

import (
	"math"
	"time"
)

// Result is the outcome of one decision.
//
// For a policy of several rules it describes the most restrictive rule: when
// denied, the rule that needs the longest wait; when allowed, the rule with
// the least Remaining. Rules holds every rule's own view.
type Result struct {
	// Allowed reports whether the events were admitted (and consumed).
	Allowed bool
	// Limit is the limit of the rule that decided, with Burst filled in.
	Limit Limit
	// Rule is the name of the rule that decided.
	Rule string
	// Remaining is the number of further unit-cost events admissible right
	// now, by every rule of the policy.
	Remaining int
	// RetryAfter is, when denied, the time until the same request would be
	// admitted; 0 when allowed.
	RetryAfter time.Duration
	// ResetAfter is the time until the key is back to its full, untouched
	// state under every rule.
	ResetAfter time.Duration
	// Delay is how long an admitted request must wait before it proceeds.
	// Only LeakyBucket rules set it; for the others it is 0.
	Delay time.Duration
	// ShadowDenied is set in shadow mode (WithShadow) when the rules would
	// have denied the request; Allowed is then true and RetryAfter 0.
	ShadowDenied bool
	// Rules holds one entry per rule of the policy, in the policy's order.
	// It is nil when Redis could not be asked and FailOpen or FailClosed
	// decided, when the caller's own context ended the decision, or when
	// shadow mode admitted a cost refused before Redis is asked: no rule
	// decided.
	Rules []RuleResult
}

// RuleResult is one rule's view of a decision. When the policy denies, no
// rule consumes, so every RuleResult then describes the state before the
// request; Allowed tells whether that rule alone would have admitted it.
type RuleResult struct {
	Name       string
	Limit      Limit
	Allowed    bool
	Remaining  int
	RetryAfter time.Duration
	ResetAfter time.Duration
	Delay      time.Duration
}

// buildResult turns a request's answer into a Result, in the unpacked form
// parseReply makes of the script's reply (allowed, then five integers per
// rule: allowed, remaining, retry, reset, delay). Local.decide returns the
// same form, so the script and the Go twin share it.
func buildResult(rules []compiledRule, v []int64) Result {
	res := Result{Allowed: v[0] == 1, Rules: make([]RuleResult, len(rules))}
	decider := -1
	for i := range rules {
		w := v[1+5*i:]
		rr := RuleResult{
			Name:       rules[i].Name,
			Limit:      rules[i].Limit,
			Allowed:    w[0] == 1,
			Remaining:  int(w[1]),
			RetryAfter: micros(w[2]),
			ResetAfter: micros(w[3]),
			Delay:      micros(w[4]),
		}
		res.Rules[i] = rr
		if rr.ResetAfter > res.ResetAfter {
			res.ResetAfter = rr.ResetAfter
		}
		if rr.Delay > res.Delay {
			res.Delay = rr.Delay
		}
		if i == 0 || rr.Remaining < res.Remaining {
			res.Remaining = rr.Remaining
		}
		// The deciding rule: when denied, the longest RetryAfter; when
		// allowed, the least Remaining. Ties go to the earlier rule.
		switch {
		case decider < 0:
			decider = i
		case !res.Allowed && rr.RetryAfter > res.Rules[decider].RetryAfter:
			decider = i
		case res.Allowed && rr.Remaining < res.Rules[decider].Remaining:
			decider = i
		}
	}
	d := res.Rules[decider]
	res.Limit, res.Rule = d.Limit, d.Name
	if !res.Allowed {
		res.RetryAfter = d.RetryAfter
	}
	return res
}

// micros converts microseconds of a reply to a Duration, the longest one
// for more than a Duration holds. A reply never says less than zero, but
// Redis answers a Lua number past int64 (or NaN) with int64's least: that
// is more too. (A value from outside, with a TTL as long, can make the
// script say so; wrapped round, a denial said RetryAfter 0.)
func micros(v int64) time.Duration {
	if v < 0 || v > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(v) * time.Microsecond
}
