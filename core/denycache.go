package core

import (
	"sync"
	"sync/atomic"
	"time"
)

// denyCache remembers recent denials so that a flood on a denied key is
// answered in-process instead of by a script per request.
//
// When Redis denies n events for a key with RetryAfter d, nothing but a
// Reset can make n events admissible before d has passed: other instances
// can only consume more, and every algorithm's RetryAfter is the earliest
// time the same request fits. So until then the limiter answers a request
// of the same key and n or more events from the cache, with RetryAfter and
// ResetAfter counted down by the time elapsed: a larger request cannot fit
// before a smaller one would, so for it the countdown is a lower bound, and
// once it ends Redis tells the rest. A smaller request goes to Redis: it
// may fit sooner. (Keeping the smallest denied cost, rather than the last,
// spares Redis a flood whose costs vary.)
//
// What the cache cannot see: a Reset made through another Limiter value,
// in this process or another (this limiter's own Reset clears its entry),
// and Remaining of the rules, which refill meanwhile: the cached answer
// keeps a rule's Remaining as it was at the denial (the denied cost, at
// least, for a rule that denied and whose own wait is over), never higher
// than the truth.
type denyCache struct {
	shards [denyShards]denyShard
	used   int // shards in use: fewer than denyShards for a smaller size
	limit  int // entries per shard
	// tick is the coarsest clock Redis decides the limiter's rules by (a
	// microsecond, or a millisecond for the largest limits: see
	// compileRule): a denial's RetryAfter counts from the start of Redis's
	// tick, up to a tick before the request reached it (see put).
	tick time.Duration
	// resets counts Resets: a denial decided before a Reset may arrive
	// after it, and must not be cached then (see put).
	resets atomic.Uint64
}

const denyShards = 16

type denyShard struct {
	mu      sync.RWMutex
	entries map[string]denyEntry
}

type denyEntry struct {
	n     int
	at    time.Time // when Redis denied (monotonic clock)
	until time.Time
	res   Result
}

func newDenyCache(size int, tick time.Duration) *denyCache {
	used := min(max(size, 1), denyShards)
	c := &denyCache{used: used, limit: max(size/used, 1), tick: tick}
	for i := range c.shards {
		c.shards[i].entries = make(map[string]denyEntry)
	}
	return c
}

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[shardHash(key)%uint64(c.used)]
}

// get returns the cached denial that answers n events for key (one of n
// or fewer), counted down to now.
func (c *denyCache) get(key string, n int, now time.Time) (Result, bool) {
	s := c.shard(key)
	s.mu.RLock()
	e, ok := s.entries[key]
	s.mu.RUnlock()
	if !ok || n < e.n || !now.Before(e.until) {
		return Result{}, false
	}
	// A request that started before the entry was made counts from the
	// entry: RetryAfter never above what Redis said.
	elapsed := max(now.Sub(e.at), 0)
	res := e.res
	res.RetryAfter -= elapsed
	res.ResetAfter = max(res.ResetAfter-elapsed, 0)
	res.Rules = make([]RuleResult, len(e.res.Rules))
	for i, rr := range e.res.Rules {
		rr.RetryAfter = max(rr.RetryAfter-elapsed, 0)
		rr.ResetAfter = max(rr.ResetAfter-elapsed, 0)
		if rr.RetryAfter == 0 && !rr.Allowed {
			// This rule's own wait is over: the denied cost fits it now.
			rr.Allowed, rr.Remaining = true, max(rr.Remaining, e.n)
		}
		res.Rules[i] = rr
	}
	return res, true
}

// put caches a denial of n events for key. now is when the request was
// sent, not when the answer came, and the entry ends a tick before now +
// RetryAfter: Redis counted RetryAfter from the start of its tick (its
// clock read in whole ticks), which may be up to a tick before the moment
// it decided, hence before now. Ending early costs a script call; ending
// late would deny a request Redis admits. RetryAfter and ResetAfter are
// counted down from now, as the request's own answer was.
//
// A live entry of the same cost or a smaller one is kept, not replaced: it
// answers this cost already, and callers that reached Redis together get
// denials a few microseconds apart; replacing one by another would make
// RetryAfter jump back up. A denial of a smaller cost replaces an entry of
// a larger one, since it answers more requests (the larger cost's answers
// then move by at most a request's latency, the two countdowns having
// started from different requests). The entry keeps a copy of res's Rules:
// the caller's Result is its own to change.
//
// resets is the count of Resets read before the request was sent: if a
// Reset happened since, the denial may predate it and is not cached.
func (c *denyCache) put(key string, n int, res Result, now time.Time, resets uint64) {
	if res.Allowed || res.RetryAfter <= c.tick {
		return
	}
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.resets.Load() != resets {
		return
	}
	old, ok := s.entries[key]
	if ok && old.n <= n && now.Before(old.until) {
		return
	}
	if !ok && len(s.entries) >= c.limit {
		for k, e := range s.entries { // make room: drop what has expired
			if !now.Before(e.until) {
				delete(s.entries, k)
			}
		}
		if len(s.entries) >= c.limit {
			return // full of live denials: this one goes to Redis next time
		}
	}
	res.Rules = append([]RuleResult(nil), res.Rules...)
	s.entries[key] = denyEntry{n: n, at: now, until: now.Add(res.RetryAfter - c.tick), res: res}
}

func (c *denyCache) forget(key string) {
	s := c.shard(key)
	s.mu.Lock()
	c.resets.Add(1)
	delete(s.entries, key)
	s.mu.Unlock()
}
