package core

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"time"
)

// maxExact bounds every integer the scripts compute. Lua numbers are float64,
// exact up to 2^53; staying below 2^50 leaves room for the sums of a few
// such terms.
const maxExact = 1 << 50

// compiledRule is a validated rule with the integer parameters its script
// and its twin compute with.
//
// Time is counted in ticks of tick microseconds: 1, or 1000 for a limit
// whose arithmetic would not stay exact in microseconds (see fits and the
// Limit doc). For the meter algorithms (LeakyBucket, TokenBucket, GCRA)
// one event costs emission = period/rate ticks; to keep
// it an integer, levels are kept in units of 1/rateUnits tick:
//
//	g          = gcd(Rate, periodTicks)
//	rateUnits  = Rate / g        // units drained (or refilled) per tick
//	eventUnits = periodTicks / g // units per event
//	capUnits   = Burst × eventUnits
type compiledRule struct {
	Rule
	spec     *algorithmSpec // its algorithm's entry of algorithmTable
	capacity int            // the largest n ever admitted at once

	tick        int64 // microseconds per tick
	periodTicks int64
	rateUnits   int64
	eventUnits  int64
	capUnits    int64
	maxDelay    int64 // LeakyBucket: the longest delay admitted, in ticks; -1 for none

	args []interface{} // the rule's script arguments, preformatted
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// compilePolicy validates rules and the options that change decisions
// (WithMaxDelay), for NewPolicy and NewLocal alike.
func compilePolicy(rules []Rule, o options) ([]compiledRule, error) {
	if o.maxDelaySet && o.maxDelay < 0 {
		return nil, fmt.Errorf("%w: max delay %s must not be negative", ErrInvalidConfig, o.maxDelay)
	}
	compiled, err := compileRules(rules)
	if err != nil {
		return nil, err
	}
	if o.maxDelaySet {
		for i := range compiled {
			compiled[i].withMaxDelay(o.maxDelay)
		}
	}
	return compiled, nil
}

func compileRules(rules []Rule) ([]compiledRule, error) {
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: no rules", ErrInvalidConfig)
	}
	index := make(map[string]int, len(rules))
	out := make([]compiledRule, 0, len(rules))
	for i, r := range rules {
		// The algorithm first: New names its rule after it, so an empty
		// algorithm is what to report, not the empty name it makes.
		name := ""
		if r.Name != "" {
			name = fmt.Sprintf(" (%q)", r.Name)
		}
		if r.Algorithm == "" {
			return nil, fmt.Errorf("%w: rule %d%s has no algorithm", ErrInvalidConfig, i, name)
		}
		if !r.Algorithm.valid() {
			return nil, fmt.Errorf("%w: rule %d%s: unknown algorithm %q", ErrInvalidConfig, i, name, r.Algorithm)
		}
		if r.Name == "" {
			return nil, fmt.Errorf("%w: rule %d has an empty name", ErrInvalidConfig, i)
		}
		if j, dup := index[r.Name]; dup {
			return nil, fmt.Errorf("%w: rules %d and %d are both named %q", ErrInvalidConfig, j, i, r.Name)
		}
		index[r.Name] = i
		c, err := compileRule(r)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %q: %s", ErrInvalidLimit, r.Name, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// compileRule validates r; its error is a bare description of the problem.
func compileRule(r Rule) (compiledRule, error) {
	l := r.Limit
	spec := r.Algorithm.spec()
	switch {
	case spec == nil:
		return compiledRule{}, fmt.Errorf("unknown algorithm %q", r.Algorithm)
	case l.Rate <= 0:
		return compiledRule{}, fmt.Errorf("rate %d must be positive", l.Rate)
	case l.Period <= 0:
		return compiledRule{}, fmt.Errorf("period %s must be positive", l.Period)
	case l.Period < time.Millisecond:
		return compiledRule{}, fmt.Errorf("period %s is shorter than 1ms", l.Period)
	case l.Period%time.Microsecond != 0:
		return compiledRule{}, fmt.Errorf("period %s is not a whole number of microseconds", l.Period)
	case l.Burst < 0:
		return compiledRule{}, fmt.Errorf("burst %d must not be negative", l.Burst)
	}
	if l.Burst == 0 {
		l.Burst = l.Rate
	}
	if spec.kind == windowed && l.Burst != l.Rate {
		return compiledRule{}, fmt.Errorf("%s counts whole windows: burst %d must be 0 or equal to rate %d", r.Algorithm, l.Burst, l.Rate)
	}
	r.Limit = l
	c := compiledRule{Rule: r, spec: spec, capacity: l.Burst, maxDelay: -1}
	periodMicros := int64(l.Period / time.Microsecond)
	for _, tick := range []int64{1, 1000} {
		if periodMicros%tick != 0 {
			break
		}
		c.tick = tick
		c.periodTicks = periodMicros / tick
		g := gcd(int64(l.Rate), c.periodTicks)
		c.rateUnits = int64(l.Rate) / g
		c.eventUnits = c.periodTicks / g
		c.capUnits = int64(l.Burst) * c.eventUnits
		if c.fits() {
			c.args = c.scriptArgs()
			return c, nil
		}
	}
	bound := ""
	if spec.bound != "" {
		bound = fmt.Sprintf("; %s also needs %s", r.Algorithm, spec.bound)
	}
	return compiledRule{}, fmt.Errorf("limit %s is too large to decide exactly: rate and burst must be at most 2^50, and a whole refill, or two periods, at most 2^50µs (35 years)%s", l, bound)
}

// fits reports whether every quantity of c stays exact in a Lua number,
// the durations it reports in microseconds included (a whole refill of a
// bucket, two windows: at most 2^50µs, about 35 years), then whatever
// bound its algorithm adds (algorithmSpec.fits).
//
// Only the meters compute with units: the windows, which compare counts
// and time stamps, always fit in microsecond ticks when they fit at all,
// and never count in milliseconds unless their own bound says so
// (SlidingWindowCounter's, which multiplies counts by ticks).
func (c *compiledRule) fits() bool {
	if c.periodTicks > maxExact || int64(c.Limit.Rate) > maxExact {
		return false
	}
	meter := c.spec.kind == metered
	if meter && (int64(c.Limit.Burst) > maxExact/c.eventUnits || c.rateUnits > maxExact) {
		return false
	}
	longest := 2 * c.periodTicks // SlidingWindowCounter's reset, the most of the windows
	if meter {
		longest = c.refillTicks()
	}
	if longest > maxExact/c.tick {
		return false
	}
	return c.spec.fits == nil || c.spec.fits(c)
}

// refillTicks returns how long a meter takes to refill (or drain) its
// whole burst, in ticks, rounded up.
func (c *compiledRule) refillTicks() int64 {
	return ceilDiv(c.capUnits, c.rateUnits)
}

// scriptArgs returns the rule's ARGV entries: algorithm code (its position
// in algorithmTable, from 1), tick, then the algorithm's five parameters a
// to e (algorithmSpec.params; see the headers of the .lua files).
func (c *compiledRule) scriptArgs() []interface{} {
	p := c.spec.params(c)
	args := make([]interface{}, 0, 2+len(p))
	args = append(args, strconv.Itoa(c.code()), strconv.FormatInt(c.tick, 10))
	for _, v := range p {
		args = append(args, strconv.FormatInt(v, 10))
	}
	return args
}

// code is the number the script knows c's algorithm by (see
// algorithmSpec.code).
func (c *compiledRule) code() int { return c.spec.code() }

// polices is the delay bound of a meter that admits without delay.
const polices = -2

// meterDelay is a meter's fourth parameter, d in lua/meter.lua: for
// LeakyBucket, which shapes, its delay bound in ticks or -1 for none; for
// TokenBucket and GCRA, polices.
func (c *compiledRule) meterDelay() int64 {
	if c.spec.shapes {
		return c.maxDelay
	}
	return polices
}

// fixedWindowInteger reports whether a FixedWindow rule keeps its count as
// one integer, tag × 2^32 + count (see lua/fixed_window.lua): when count +
// n always fits in 32 bits (a rate below 2^31), and when its 2^19 windows
// ahead span a day at least (a period of 164.795ms or more), so that the
// tags tell a clock step back of a day from a past window.
func fixedWindowInteger(rate, periodMicros int64) bool {
	return rate < 1<<31 && periodMicros >= 164_795
}

// counterLayout returns how a SlidingWindowCounter key of the given rate
// packs its window tag and two counts into one integer below 2^53 (see
// lua/sliding_window_counter.lua): place, the power of two above 2 × rate,
// and tags, the number of window tags that fit beside two counts. It
// returns 0, 0 (the string form) when fewer than 2^11 tags would fit, that
// is for rates of 2^20 or more.
func counterLayout(rate int64) (place, tags int64) {
	place = 1
	for place <= 2*rate {
		place *= 2
	}
	if place > 1<<21 {
		return 0, 0
	}
	return place, (1<<53)/(place*place) - 1
}

// withMaxDelay bounds the delay of a LeakyBucket rule to d (rounded down to
// whole ticks). A bound the meter can never reach (its whole drain time or
// more) is dropped, which also keeps d × rateUnits small.
func (c *compiledRule) withMaxDelay(d time.Duration) {
	if !c.spec.shapes {
		return
	}
	ticks := int64(d/time.Microsecond) / c.tick
	if ticks >= c.refillTicks() {
		ticks = -1
	}
	c.maxDelay = ticks
	c.args = c.scriptArgs()
}

// fingerprint returns a hash of the rules: name, algorithm, rate, period
// and burst of each, in order, and the form of the state where it changed
// in a way earlier builds' keys must not be read as
// (algorithmSpec.stateForm). It keeps 128 bits of SHA-256, so that among
// even millions of limiters two with different rules practically never
// share keys (a chance of about 2^-89 for a million), written in 22 base64url characters (A-Z a-z 0-9 - _,
// none of them special in a key or a hash tag). Keys of the 32-bit form
// before it (8 hex digits) are never read again and expire on their TTL.
func fingerprint(rules []compiledRule) string {
	h := sha256.New()
	for _, r := range rules {
		fmt.Fprintf(h, "%q|%s|%d|%d|%d", r.Name, r.Algorithm, r.Limit.Rate, r.Limit.Period, r.Limit.Burst)
		if form := r.spec.stateForm; form != "" {
			h.Write([]byte("|" + form))
		}
		h.Write([]byte("\n"))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
}
