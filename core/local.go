package core

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Local is the pure-Go twin of a Limiter: the same rules, decided with the
// same integer arithmetic as the Lua scripts, held in this process's memory
// and driven by an explicit time. Given the same sequence of requests and
// times, a Local and a Limiter return the same Results; the tests check this
// decision by decision.
//
// A Local limits one process only. It is safe for concurrent use. Keys are
// forgotten once their state is back to untouched, like Redis keys whose TTL
// has run out, so memory follows the number of recently active keys. A
// Local made by NewLocal holds every such key; a Limiter's twin holds at
// most DefaultLocalKeys of them.
type Local struct {
	mu    sync.Mutex
	rules []compiledRule
	keys  map[string][]localState
	ops   int
	limit int // keys held at most; 0: no bound

	// tidyAt is when tidy next drops the expired keys (Unix microseconds);
	// 0 once tidy found none held, until a key is stored. Set with mu held
	// (tidy's CompareAndSwap elects the caller that tidies), read without.
	tidyAt atomic.Int64
}

// DefaultLocalKeys bounds the keys a Limiter's twin (FailLocal) holds: a key
// takes about 180 bytes with one rule and 80 more per further rule (its own
// bytes apart), so about 12 MB when full with one rule; a SlidingWindowLog
// rule adds 16 to 64 bytes per request in its window (up to Rate per key;
// its array keeps up to four times its entries, and 16), as its sorted set
// grows in Redis. When a new key finds
// it full, the twin forgets the keys whose state is back to untouched and,
// if that frees less than an eighth of it, the keys closest to untouched
// (the soonest to expire) until an eighth is free. A forgotten key is
// admitted afresh, as after its TTL.
const DefaultLocalKeys = 65536

// tidyEvery is how often the twin of a Limiter whose Redis is healthy
// again drops the keys that have expired (see tidy).
const tidyEvery = 10 * time.Second

// localState is one rule's state of a key, as its Redis key holds it; the
// sliding log keeps only the requests still in the window (Redis removes
// the others once a Period, and never counts them).
type localState struct {
	present bool
	expires int64 // microseconds; the state is dropped from then on

	w, p, c int64      // FixedWindow (w, c), SlidingWindowCounter (w, p, c), SlidingWindowLog (c: the sum of the costs in log)
	log     []logEntry // SlidingWindowLog: the admitted requests still in the window, oldest first
	t, v    int64      // meters: the TAT, t its whole ticks and v the remainder in units
}

// decision is one rule's answer; the fields match the Lua functions' returns.
type decision struct {
	ok                                           bool
	avail, retry, resetBefore, resetAfter, delay int64
	after                                        int64      // unit events admissible once consumed, when ok
	next                                         localState // the state once consumed, when ok
}

// NewLocal returns the in-memory twin of a Limiter built with these rules.
// It validates them exactly like NewPolicy. Of the options, only those that
// change decisions (WithMaxDelay) matter; the others are ignored, and a nil
// Option is skipped, as by NewPolicy.
func NewLocal(rules []Rule, opts ...Option) (*Local, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	compiled, err := compilePolicy(rules, o)
	if err != nil {
		return nil, err
	}
	return &Local{rules: compiled, keys: make(map[string][]localState)}, nil
}

// AllowN reports whether n events for key are admitted at time now and, if
// so, consumes them under every rule; like Limiter.AllowN.
func (l *Local) AllowN(now time.Time, key string, n int) (Result, error) {
	if err := checkCost(l.rules, "AllowN", n); err != nil {
		return Result{}, err
	}
	return buildResult(l.rules, l.decide(now, key, true, n)), nil
}

// Peek reports what AllowN(now, key, 1) would decide, without consuming;
// like Limiter.Peek.
func (l *Local) Peek(now time.Time, key string) Result {
	return buildResult(l.rules, l.decide(now, key, false, 1))
}

// Reset forgets key under every rule.
func (l *Local) Reset(key string) {
	l.mu.Lock()
	delete(l.keys, key)
	l.mu.Unlock()
}

// tidy is called by a limiter after each decision Redis took. The twin
// decides nothing then, so nothing else sweeps it: at most once every
// tidyEvery while it holds keys, it drops those that have expired and, once
// none is left, the memory they took (a Go map never shrinks). While it
// holds no key, tidy costs one atomic load.
func (l *Local) tidy() {
	at := l.tidyAt.Load()
	if at == 0 {
		return
	}
	now := time.Now().UnixMicro()
	if now < at || !l.tidyAt.CompareAndSwap(at, now+tidyEvery.Microseconds()) {
		return // not yet, or another caller does it
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropExpired(now)
	if len(l.keys) == 0 {
		l.keys = make(map[string][]localState)
		l.tidyAt.Store(0)
	}
}

// decide returns the answer policy.lua would give, in the unpacked form
// parseReply makes of it and buildResult reads: allowed, then five integers
// per rule (see parseReply).
func (l *Local) decide(now time.Time, key string, consume bool, n int) []int64 {
	nowMicros := now.UnixMicro()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(nowMicros)
	states := l.keys[key]
	if states == nil {
		states = make([]localState, len(l.rules))
	}
	out := make([]int64, 1+5*len(l.rules))
	out[0] = 1
	ds := make([]decision, len(l.rules))
	for i := range l.rules {
		r := &l.rules[i]
		s := &states[i]
		if s.present && nowMicros >= s.expires {
			*s = localState{}
		}
		d := r.decide(s, nowMicros/r.tick, int64(n))
		ds[i] = d
		k := 1 + 5*i
		if d.ok {
			out[k] = 1
		} else {
			out[0] = 0
		}
		out[k+1] = d.avail
		out[k+2] = d.retry * r.tick
		out[k+3] = d.resetBefore * r.tick
		out[k+4] = d.delay * r.tick
	}
	if out[0] == 0 {
		for i := range l.rules {
			out[1+5*i+4] = 0
		}
		return out
	}
	if consume {
		if _, held := l.keys[key]; !held && l.limit > 0 && len(l.keys) >= l.limit {
			l.makeRoom(nowMicros)
		}
		for i := range l.rules {
			r := &l.rules[i]
			k := 1 + 5*i
			states[i] = ds[i].next
			if log := states[i].log; cap(log) > 4*len(log)+16 {
				// a SlidingWindowLog's burst gone by: a smaller array
				states[i].log = append(make([]logEntry, 0, 2*len(log)+1), log...)
			}
			states[i].present = true
			ms := ceilDiv(ds[i].resetAfter*r.tick, 1000)
			if ms < 1 {
				ms = 1
			}
			states[i].expires = nowMicros + ms*1000
			out[k+1] = ds[i].after
			out[k+3] = ds[i].resetAfter * r.tick
		}
		l.keys[key] = states
		if l.tidyAt.Load() == 0 {
			l.tidyAt.Store(nowMicros + tidyEvery.Microseconds())
		}
	}
	return out
}

// sweep drops expired keys now and then, so idle keys do not pile up: once
// every max(1024, keys) decisions, so that its cost per decision stays
// constant however many keys there are (the map holds at most the live keys
// and those of the decisions since the last sweep).
func (l *Local) sweep(nowMicros int64) {
	l.ops++
	if l.ops < max(1024, len(l.keys)) {
		return
	}
	l.ops = 0
	l.dropExpired(nowMicros)
}

// dropExpired forgets the keys whose every rule is back to untouched, with
// l.mu held.
func (l *Local) dropExpired(nowMicros int64) {
	for k, states := range l.keys {
		if expiry(states) <= nowMicros {
			delete(l.keys, k)
		}
	}
}

// expiry is when a key's state is back to untouched under every rule.
func expiry(states []localState) int64 {
	var at int64
	for _, s := range states {
		if s.present {
			at = max(at, s.expires)
		}
	}
	return at
}

// makeRoom makes room for a new key in a full twin, with l.mu held: it
// drops the expired keys and, if fewer than an eighth of the limit went,
// the keys closest to untouched until an eighth of the limit is free. It
// takes time in proportion to the keys held, at most once per eighth of the
// limit of new keys.
func (l *Local) makeRoom(nowMicros int64) {
	l.dropExpired(nowMicros)
	keep := l.limit - max(l.limit/8, 1)
	drop := len(l.keys) - keep
	if drop <= 0 {
		return
	}
	at := make([]int64, 0, len(l.keys))
	for _, states := range l.keys {
		at = append(at, expiry(states))
	}
	slices.Sort(at)
	// Every key expiring before the drop-th expiry goes (fewer than drop
	// of them), then keys expiring at that instant until drop have gone.
	last := at[drop-1]
	for k, states := range l.keys {
		if expiry(states) < last {
			delete(l.keys, k)
			drop--
		}
	}
	for k, states := range l.keys {
		if drop == 0 {
			break
		}
		if expiry(states) == last {
			delete(l.keys, k)
			drop--
		}
	}
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if q*b < a {
		q++
	}
	return q
}

// checkCost validates n against every rule.
func checkCost(rules []compiledRule, method string, n int) error {
	if n <= 0 {
		return fmt.Errorf("sluice: %s(n=%d): n must be positive", method, n)
	}
	if i := exceeded(rules, n); i >= 0 {
		r := &rules[i]
		return fmt.Errorf("%w: %s(n=%d) exceeds rule %q, which admits at most %d at once",
			ErrCostExceedsLimit, method, n, r.Name, r.capacity)
	}
	return nil
}

// exceeded returns the index of the first rule that can never admit n
// events at once, or -1.
func exceeded(rules []compiledRule, n int) int {
	for i := range rules {
		if n > rules[i].capacity {
			return i
		}
	}
	return -1
}

// decide is the twin of the rule's Lua function (its algorithm's
// algorithmSpec.decide); see lua/*.lua for the meaning of every step.
func (r *compiledRule) decide(s *localState, now, n int64) decision {
	return r.spec.decide(r, s, now, n)
}
