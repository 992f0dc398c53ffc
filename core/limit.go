package core

import (
	"fmt"
	"time"
)

// Algorithm names a rate-limiting algorithm. Each one is a Lua script run
// atomically inside Redis and has a pure-Go twin (see [Local]).
type Algorithm string

// The six algorithms. docs/how-it-decides.md compares them (accuracy, burst
// behaviour, Redis memory per key); in short:
//
//   - FixedWindow counts events per aligned window of Period. Cheapest, but it
//     admits up to 2×Rate across a window edge (Rate at the end of one window,
//     Rate again at the start of the next).
//   - SlidingWindowLog keeps one sorted-set entry per admitted request,
//     carrying its cost: exact for any trailing window, and a request's
//     work in Redis does not grow with its cost. Memory is O(requests) per
//     key: the requests of the window (at most Rate), and up to a Period's
//     more, since those gone from the window are removed once a Period.
//   - SlidingWindowCounter weights the previous window's count by its overlap
//     with the trailing window: O(1) memory, approximate (see
//     docs/how-it-decides.md for the worst case).
//   - LeakyBucket shapes: it admits like a meter of capacity Burst draining at
//     Rate/Period and tells each admitted request how long to wait
//     ([Result.Delay]) so that requests proceed evenly spaced.
//   - TokenBucket polices: capacity Burst, refilled continuously; what it
//     admits proceeds at once.
//   - GCRA polices like TokenBucket: the two admit exactly the same
//     sequences, and all three meters keep the same state, a single
//     timestamp per key (the theoretical arrival time).
const (
	FixedWindow          Algorithm = "fixed_window"           // a count per window, stored with its expiry in one step
	SlidingWindowLog     Algorithm = "sliding_window_log"     // one sorted-set entry per admitted request: exact
	SlidingWindowCounter Algorithm = "sliding_window_counter" // weighted previous + current window
	LeakyBucket          Algorithm = "leaky_bucket"           // a queue: each admitted request waits its turn (Result.Delay) to drain at Rate
	TokenBucket          Algorithm = "token_bucket"           // capacity Burst, refilled continuously at Rate/Period
	GCRA                 Algorithm = "gcra"                   // theoretical arrival time, one key
)

// Limit is Rate events per Period, at most Burst at once. Burst 0 means
// Burst = Rate. Window algorithms count whole windows, so for them Burst must
// be 0 or equal to Rate.
//
// Period must be at least one millisecond and a whole number of microseconds.
// Decisions are made in integer microseconds, except where a limit's
// arithmetic would pass 2^50 (the bound under which every sum of the
// scripts stays exact in a Lua number): then the clock is read in whole
// milliseconds. With P the Period in microseconds, that is
//
//   - for LeakyBucket, TokenBucket and GCRA, which keep debt in units of
//     1/r of a tick, r = Rate / gcd(Rate, the Period in ticks), when
//     Burst × P / gcd(Rate, P) > 2^50: PerDay(13033)
//     or PerHour(400009), not PerDay(1000000) (gcd 10^6);
//   - for SlidingWindowCounter, which compares counts × P, when
//     2 × Rate × P > 2^50: PerDay(6516) or PerHour(156375) and above;
//   - for FixedWindow and SlidingWindowLog, never: they compare counts and
//     microsecond times, and a SlidingWindowLog holds exactly in every
//     trailing window at every valid limit.
//
// A limit that does not stay exact in milliseconds either (a rate or burst
// above 2^50, or a whole refill, or two periods, longer than 2^50µs, about
// 35 years) is ErrInvalidLimit.
type Limit struct {
	Rate   int
	Period time.Duration
	Burst  int
}

// PerSecond returns a Limit of rate events per second, with Burst 0, which
// means Burst = rate.
func PerSecond(rate int) Limit { return Limit{Rate: rate, Period: time.Second} }

// PerMinute returns a Limit of rate events per minute, with Burst 0, which
// means Burst = rate.
func PerMinute(rate int) Limit { return Limit{Rate: rate, Period: time.Minute} }

// PerHour returns a Limit of rate events per hour, with Burst 0, which
// means Burst = rate.
func PerHour(rate int) Limit { return Limit{Rate: rate, Period: time.Hour} }

// PerDay returns a Limit of rate events per day (24 hours), with Burst 0,
// which means Burst = rate.
func PerDay(rate int) Limit { return Limit{Rate: rate, Period: 24 * time.Hour} }

// String formats l as "10/1s" or "10/1s burst 20".
func (l Limit) String() string {
	if l.Burst == 0 || l.Burst == l.Rate {
		return fmt.Sprintf("%d/%s", l.Rate, l.Period)
	}
	return fmt.Sprintf("%d/%s burst %d", l.Rate, l.Period, l.Burst)
}

// Rule names one limit of a policy. Name shows up in RateLimit headers and in
// [RuleResult]; it must be unique within a policy.
type Rule struct {
	Name      string
	Algorithm Algorithm
	Limit     Limit
}
