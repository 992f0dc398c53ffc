package core

// An algorithm is one entry of algorithmTable; everything else in Go is
// derived from it: Algorithms, Algorithm.valid and Algorithm.windowed, the
// code the script dispatches on (the entry's position), the script's
// parameters, the bounds a limit must fit, the state form in the key
// fingerprint, the order in which the embedded Lua files are assembled,
// the script's own dispatch table (see scriptSource, which writes
// `local algorithms = {…}` into the script from this table) and the twin's
// dispatch (Local).
//
// A new algorithm touches exactly:
//
//   - core/limit.go: its exported Algorithm constant, with its doc and a
//     line comment, which the adapters' generated constructor docs quote
//     (one that names Result.Delay also tells that the middleware holds
//     the request);
//   - core/algorithms.go: its entry, appended to algorithmTable (appending
//     keeps the codes of the others: they are positions);
//   - core/lua/<name>.lua: its Lua function, `local function <name>(key,
//     now, a, b, c, n, tick, d, e)` returning what policy.lua expects (see
//     prelude.lua, which defines the return shape), named like the
//     constant's value;
//   - core/local_<name>.go: its twin, a decide function of the same
//     arithmetic (if its state fits none of localState's fields, a field
//     added there, in core/local.go);
//   - its tests: a step table in core/algorithms_test.go, its pinned
//     fingerprint in core/fingerprint_test.go; and its docs
//     (docs/how-it-decides.md, the constant list in doc.go's overview).
//
// policy.lua needs no change, unless the algorithm wants what policy.lua
// gives FixedWindow and SlidingWindowCounter by name: a take function like
// fw_take and swc_take, which takes a consuming request's events with one
// INCRBY. A lone loop of its own needs no edit of policy.lua either: it is
// a file, lua/<name>_lone.lua, named in the entry's lone field (see
// algorithmSpec.lone and lua/meter_lone.lua, lua/fixed_window_lone.lua,
// lua/sliding_window_counter_lone.lua).

// algorithmKind says how an algorithm counts, which decides how a limit
// is validated and which bounds keep its arithmetic exact (see fits).
type algorithmKind int

const (
	// windowed algorithms count events per window of Period: Burst must
	// equal Rate, and they compare counts, never units.
	windowed algorithmKind = iota + 1
	// metered algorithms keep the meter of lua/meter.lua (a TAT in units
	// of 1/rateUnits of a tick, rateUnits = Rate / gcd(Rate, the period in
	// ticks): see compiledRule): Burst is free, and Burst and the refill
	// time in units must stay exact.
	metered
)

// algorithmSpec is one algorithm, as the Go side knows it.
type algorithmSpec struct {
	name Algorithm
	kind algorithmKind

	// lua lists the embedded files under lua/ its Lua function needs, its
	// own last; a file several algorithms share (meter.lua) is assembled
	// once, where it is first listed. Its own file defines a local
	// function (or value) named like the algorithm, which the generated
	// dispatch table names.
	lua []string

	// lone, when not "", is the embedded file of its lone loop, which
	// the script runs before it makes any function (see scriptFiles): a
	// loop in the main chunk that decides the requests of a call of one
	// rule of the algorithm, in order, and stops at the first it leaves
	// to the general path. Several algorithms may share one.
	lone string

	// params returns the script's parameters a to e for c (see the
	// header of its Lua file); the script receives them after its code
	// and tick.
	params func(c *compiledRule) [5]int64

	// fits, when not nil, is a bound of the algorithm's own on top of its
	// kind's (see compiledRule.fits): false when c's arithmetic would not
	// stay exact. bound says it, for the error of a limit beyond it.
	fits  func(c *compiledRule) bool
	bound string

	// shapes is true for a meter that delays what it admits
	// (Result.Delay) rather than policing, and so honours WithMaxDelay.
	shapes bool

	// stateForm names the form of its state since it last changed in a
	// way earlier builds' keys must not be read as (see fingerprint); ""
	// for the first form. Changing it changes every key of the algorithm.
	stateForm string

	// decide is the twin of its Lua function (see Local).
	decide func(r *compiledRule, s *localState, now, n int64) decision
}

// algorithmTable holds the algorithms in the order of their codes: the
// code of an entry, which the script dispatches on, is its index + 1. The
// codes are not stored anywhere (keys are fingerprinted by name), so the
// script and the client only need to be of the same build.
//
// stateForm: TokenBucket and LeakyBucket keep GCRA's TAT (their earlier
// "<t>:<x>" would read as one). SlidingWindowLog keeps one member per
// request, named by its running sum of costs (an earlier key's members,
// one per event named "<time>:<index>", would not read as such numbers),
// with its expiry kept within a cell; and its times are microseconds at
// every limit (an earlier key of a large limit holds milliseconds).
var algorithmTable = [...]algorithmSpec{
	{
		name:   FixedWindow,
		kind:   windowed,
		lua:    []string{"fixed_window.lua"},
		lone:   "fixed_window_lone.lua",
		params: fixedWindowParams,
		decide: fixedWindow,
	},
	{
		name:      SlidingWindowLog,
		kind:      windowed,
		lua:       []string{"sliding_window_log.lua"},
		params:    slidingWindowLogParams,
		stateForm: "numbered",
		decide:    slidingWindowLog,
	},
	{
		name:   SlidingWindowCounter,
		kind:   windowed,
		lua:    []string{"sliding_window_counter.lua"},
		lone:   "sliding_window_counter_lone.lua",
		params: slidingWindowCounterParams,
		fits:   slidingWindowCounterFits,
		bound:  "rate × two periods, in milliseconds (microseconds for a period not whole in milliseconds), under 2^50",
		decide: slidingWindowCounter,
	},
	{
		name:      LeakyBucket,
		kind:      metered,
		lua:       []string{"meter.lua", "leaky_bucket.lua"},
		lone:      "meter_lone.lua",
		params:    meterParams,
		shapes:    true,
		stateForm: "tat",
		decide:    meter,
	},
	{
		name:      TokenBucket,
		kind:      metered,
		lua:       []string{"meter.lua", "token_bucket.lua"},
		lone:      "meter_lone.lua",
		params:    meterParams,
		stateForm: "tat",
		decide:    meter,
	},
	{
		name:   GCRA,
		kind:   metered,
		lua:    []string{"meter.lua", "gcra.lua"},
		lone:   "meter_lone.lua",
		params: meterParams,
		decide: meter,
	},
}

// code is the number the script knows s by: the position of its entry
// in algorithmTable, from 1 (found by name, so a copy of an entry has its
// code too).
func (s *algorithmSpec) code() int {
	for i := range algorithmTable {
		if algorithmTable[i].name == s.name {
			return i + 1
		}
	}
	return 0 // unreachable: every spec is of the table
}

// spec returns a's entry of algorithmTable, or nil when a is none of the
// constants. The table is the package's own, so nothing a caller can
// change decides what is valid.
func (a Algorithm) spec() *algorithmSpec {
	for i := range algorithmTable {
		if algorithmTable[i].name == a {
			return &algorithmTable[i]
		}
	}
	return nil
}

// Algorithms returns every algorithm, in the order of the constants, in a
// new slice each call: changing it changes nothing else. Validation does
// not read it.
func Algorithms() []Algorithm {
	out := make([]Algorithm, len(algorithmTable))
	for i := range algorithmTable {
		out[i] = algorithmTable[i].name
	}
	return out
}

// valid reports whether a is one of the constants.
func (a Algorithm) valid() bool { return a.spec() != nil }

// windowed reports whether a is counted per window, where Burst must equal Rate.
func (a Algorithm) windowed() bool {
	s := a.spec()
	return s != nil && s.kind == windowed
}

// fixedWindowParams: a = rate, b = period, c = 1 when the count is kept
// as one integer (see fixedWindowInteger), else 0.
func fixedWindowParams(c *compiledRule) [5]int64 {
	var integer int64
	if fixedWindowInteger(int64(c.Limit.Rate), c.periodTicks*c.tick) {
		integer = 1
	}
	return [5]int64{int64(c.Limit.Rate), c.periodTicks, integer}
}

// slidingWindowLogParams: a = rate, b = period.
func slidingWindowLogParams(c *compiledRule) [5]int64 {
	return [5]int64{int64(c.Limit.Rate), c.periodTicks}
}

// slidingWindowCounterParams: a = rate, b = period, c and d its integer
// layout (see counterLayout).
func slidingWindowCounterParams(c *compiledRule) [5]int64 {
	place, tags := counterLayout(int64(c.Limit.Rate))
	return [5]int64{int64(c.Limit.Rate), c.periodTicks, place, tags}
}

// slidingWindowCounterFits: it compares previous×(period−elapsed) +
// (current+n)×period with rate×period.
func slidingWindowCounterFits(c *compiledRule) bool {
	return int64(c.Limit.Rate) <= maxExact/(2*c.periodTicks)
}

// meterParams: a = units per tick, b = units per event, c = capacity in
// units, d = the delay bound (see meterDelay), e = the cells in which the
// key's TTL is rounded up (see cell_ttl in lua/helpers.lua): the period,
// or the time to refill (or drain) the burst when that is shorter, so that
// an idle key outlives its state by less than either.
func meterParams(c *compiledRule) [5]int64 {
	cell := min(c.periodTicks, c.refillTicks())
	return [5]int64{c.rateUnits, c.eventUnits, c.capUnits, c.meterDelay(), cell}
}
