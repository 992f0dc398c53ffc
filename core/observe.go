package core

import "time"

// Outcome is what one decision came to, for observers.
type Outcome int

const (
	// OutcomeAllowed: Redis admitted the request.
	OutcomeAllowed Outcome = iota
	// OutcomeDenied: Redis denied it (or, in shadow mode, would have:
	// Shadow set).
	OutcomeDenied
	// OutcomeError: Redis could not be asked; FailOpen or FailClosed
	// decided, or the caller's own context ended the decision (not
	// admitted, whatever the failure mode). Also a request whose cost is
	// refused before Redis is asked (admitted in shadow mode): a cost no
	// rule can ever admit (Err wraps ErrCostExceedsLimit) or below 1; its
	// Rule is then empty.
	OutcomeError
	// OutcomeFallback: Redis could not be asked; the in-process twin
	// decided (FailLocal), admitting or denying (Allowed; in shadow mode,
	// Shadow when it would have denied).
	OutcomeFallback
)

// String returns "allowed", "denied", "error" or "fallback".
func (o Outcome) String() string {
	switch o {
	case OutcomeAllowed:
		return "allowed"
	case OutcomeDenied:
		return "denied"
	case OutcomeError:
		return "error"
	case OutcomeFallback:
		return "fallback"
	}
	return "Outcome(?)"
}

// Event describes one decision to an observer (see WithObserver). It holds
// no raw key: KeyHash identifies a key without revealing it, for sampling or
// spotting hot keys. It is stable within the process, and the same in every
// process given the same WithKeyHashSecret.
type Event struct {
	Outcome Outcome
	// Allowed is what the caller was told: in shadow mode true, a cost
	// refused before Redis is asked included (see OutcomeError).
	Allowed bool
	// Shadow is set in shadow mode when the rules would have denied:
	// Redis's (OutcomeDenied), the in-process twin's while Redis could not
	// be asked (OutcomeFallback), or a cost no rule can ever admit
	// (OutcomeError, admitted in shadow mode).
	Shadow bool
	// Cached is set when the deny cache answered (WithDenyCache), without
	// asking Redis.
	Cached bool
	// Rule is the name of the deciding rule. When no rule decided
	// (OutcomeError: FailOpen or FailClosed did, or the caller's context
	// ended the decision), it is the policy's first rule, as in the Result;
	// for a cost refused before Redis is asked, it is empty.
	Rule string
	// KeyHash is a keyed hash of the user key (SipHash-2-4): under a key
	// drawn when the process starts, or under WithKeyHashSecret's.
	KeyHash uint64
	// N is the cost of the request.
	N int
	// Latency is the time the decision took, Redis round trip included.
	Latency time.Duration
	// Err is the Redis error, for OutcomeError and OutcomeFallback, the
	// caller's context's error when that ended the decision, or the error
	// refusing the request's cost (see OutcomeError).
	Err error
}
