package core

import (
	"time"
)

// arm starts the watchdog for a deadline, with b.mu held.
func (b *batcher) arm(deadline time.Time) {
	b.watching, b.watchAt = true, deadline
	if b.watch == nil {
		b.watch = time.AfterFunc(time.Until(deadline), b.expire)
	} else {
		b.watch.Reset(time.Until(deadline))
	}
}

// expire is the watchdog: it ends the wait of every call whose deadline has
// passed, queued or in a batch being sent, and arms itself again for the
// earliest deadline still ahead. One timer per batcher thus bounds every
// caller's wait, instead of a timer per call: calls wait in arrival order,
// so the watchdog wakes about once per timeout however many calls pass.
// A caller whose context can end also watches it.
func (b *batcher) expire() {
	now := time.Now()
	var next time.Time
	// waiting reports whether c still waits (stillWaits ends the wait of a
	// call past its deadline), keeping the earliest deadline ahead.
	waiting := func(c *call) bool {
		if !c.stillWaits(now) {
			return false
		}
		if !c.deadline.IsZero() && (next.IsZero() || c.deadline.Before(next)) {
			next = c.deadline
		}
		return true
	}
	b.mu.Lock()
	// Queued calls that no longer wait leave the queue: while Redis hangs,
	// it holds at most a timeout's worth of callers.
	kept := b.pending[:0]
	for _, c := range b.pending {
		if waiting(c) {
			kept = append(kept, c)
		}
	}
	clear(b.pending[len(kept):])
	b.pending = kept
	for _, x := range b.scratches {
		for _, c := range x.batch {
			if c != nil { // nil: answered already (see answer)
				waiting(c)
			}
		}
	}
	b.endIdleSends()
	b.watching = false
	start := len(b.pending) > 0 && b.canStart(now)
	if start {
		b.active++
		start = b.handOver()
	}
	if !next.IsZero() {
		// At most one round a millisecond, however the deadlines fall.
		if soon := now.Add(time.Millisecond); next.Before(soon) {
			next = soon
		}
		b.arm(next)
	}
	if !start && len(b.pending) > 0 {
		b.holdBack(now)
	}
	b.mu.Unlock()
	if start {
		go b.flush(nil, 0) // what waits behind a stalled batch
	}
}

// endIdleSends ends the context of every batch being sent in which no call
// waits any more, with b.mu held: go-redis then stops waiting for a
// connection or dialling, and a decision whose caller was told it failed
// is not sent late.
func (b *batcher) endIdleSends() {
	for _, x := range b.scratches {
		if x.batch == nil {
			continue
		}
		idle := true
		for _, c := range x.batch {
			if c != nil && c.state.Load() == callWaiting {
				idle = false
				break
			}
		}
		if idle {
			x.ctx.end()
		}
	}
}

// holdBack makes the watchdog look again when the next batch in flight
// will count as stalled, with b.mu held, for a call that pending could not
// send at now.
func (b *batcher) holdBack(now time.Time) {
	var sent time.Time
	for _, x := range b.scratches {
		if x.batch != nil && !x.stalled(now) && (sent.IsZero() || x.sentAt.Before(sent)) {
			sent = x.sentAt
		}
	}
	if sent.IsZero() {
		return // none left to stall: a flusher returning, or a deadline, comes next
	}
	if at := sent.Add(stallAfter); !b.watching || at.Before(b.watchAt) {
		b.arm(at)
	}
}
