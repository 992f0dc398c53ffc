package core

import (
	"context"
	"runtime"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// The flushers: each sends batches of its batcher's queue (flush), parks
// between them while another batch is in flight, and is woken for the next
// batch (handOver) or for a share of another flusher's batch bound for a
// cluster master of its own (shareOut). The invariants they keep are
// stated at the top of batcher.go.

// wakeup is what a parked flusher is woken for: to send a share of
// another flusher's batch (see newShare), to send what is pending (send),
// or to end (neither).
type wakeup struct {
	share *execScratch
	send  bool
}

// handOver gives a place in active, just counted, to a parked flusher, with
// b.mu held. It reports false when one took it, and true when none was
// parked: the caller then starts a flusher (go b.flush(nil, 0)) once it has
// released b.mu.
func (b *batcher) handOver() bool {
	if b.parked == 0 {
		return true
	}
	b.parked--
	// Each signal has a flusher waiting for it or about to, which needs
	// no lock to take it: wake's room only spares the wait.
	b.wake <- wakeup{send: true}
	return false
}

// releaseParked lets the parked flushers go, with b.mu held, once nothing
// is active or the batcher is closed: a flusher only waits while another
// batch is in flight, so none outlives the batcher's traffic, nor its
// Close. A closed batcher with nothing left to send stops its watchdog.
func (b *batcher) releaseParked() {
	if b.active > 0 && !b.closed {
		return
	}
	for ; b.parked > 0; b.parked-- {
		b.wake <- wakeup{}
	}
	if b.closed && b.active == 0 && len(b.pending) == 0 && b.watching {
		// Nothing left to watch: armed at the latest caller's deadline
		// (hours away, with no timeout of the limiter's own), the watchdog
		// would hold a closed limiter, dropped since, until then.
		b.watch.Stop()
		b.watching = false
	}
}

// close ends the parked flushers, and makes every flusher end from now on
// when it has nothing to send rather than park: behind a batch that hangs,
// parked flushers would otherwise wait for as long as it hangs. Calls
// still go to Redis after close, each started flusher ending once its
// queue is empty.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	b.releaseParked()
	b.mu.Unlock()
}

// flush sends batches until the queue is empty, or until what is left may
// wait for a batch in flight (see mayGo). While another batch is in
// flight, it then parks until handOver wakes it for the next batch, rather
// than end and let a new goroutine take its place, whose stack would grow
// again through go-redis's calls. It ends once no other place is held, or
// once the batcher is closed (releaseParked, close). It starts with x, a
// scratch of its own, and sent calls of its own in flight, when it has
// sent a share of another flusher's batch (see flushShare).
func (b *batcher) flush(x *execScratch, sent int) {
	var done []*call // the batch just sent, to give back as spare
	for {
		if sent > 0 {
			b.load.update(time.Now())
			if sent < smallBatch && b.load.busy.Load() && b.load.quick.Load() {
				// CPU-bound, in quick turns (see cpuBound): let the
				// callers just answered, and the other goroutines
				// waiting for a CPU, run first. Those that decide again
				// queue meanwhile, while this batch's calls still count
				// as in flight (mayGo): the next batch is larger. What
				// they wait for is this flusher's next turn, which the
				// gauge has seen to be short.
				runtime.Gosched()
			}
		}
		b.mu.Lock()
		b.inflight -= sent
		if x == nil {
			if n := len(b.scratch); n > 0 {
				x, b.scratch = b.scratch[n-1], b.scratch[:n-1]
			} else {
				x = &execScratch{}
				b.scratches = append(b.scratches, x)
			}
		}
		if done != nil && b.spare == nil {
			clear(done)
			b.spare = done[:0]
		}
		// Another flusher in flight picks up what is pending when it
		// returns, unless it may go now (see mayGo).
		if len(b.pending) == 0 || b.active > 1 && !b.mayGo(time.Now()) {
			b.active--
			if len(b.pending) > 0 {
				b.holdBack(time.Now()) // in case the batch in flight stalls
			}
			b.scratch = append(b.scratch, x)
			if b.active == 0 || b.closed {
				b.releaseParked()
				b.mu.Unlock()
				return
			}
			b.parked++
			b.mu.Unlock()
			w := <-b.wake
			switch {
			case w.share != nil:
				x, done, sent = w.share, nil, b.sendShare(w.share)
			case w.send:
				x, done, sent = nil, nil, 0 // woken with a place in active
			default:
				return
			}
			continue
		}
		batch := b.pending
		if len(batch) > b.maxBatch {
			batch = batch[:b.maxBatch:b.maxBatch]
			b.pending = b.pending[b.maxBatch:]
			done = nil // a window into pending: not reusable
		} else {
			b.pending, b.spare = b.spare, nil
			done = batch
		}
		sent = len(batch)
		b.inflight += sent
		x.batch, x.sentAt = batch, time.Now()
		b.mu.Unlock()
		sent -= b.exec(x, batch) // what it handed over counts for its new flusher
	}
}

// shareOut names the master of each call of x's batch from the client's
// slot map, and hands the calls bound for every master but the first to
// flushers of their own (see newShare), one per master: each master's
// share of a batch is sent, and answered, on its own, its DELs and probes
// with it. One pipeline to several masters returns when the slowest does,
// and a master that hangs (its host gone, or stopped) would hold every
// call bound for the live masters beside its own until their callers'
// deadlines: on a busy limiter, where most batches reach every master,
// all of them. x.batch keeps the first master's calls, and those whose
// master the client could not name (they go by slot, see groupOf). It
// returns how many calls it handed over.
func (b *batcher) shareOut(ctx context.Context, x *execScratch) (handed int) {
	var masters [8]*redis.Client
	seen := masters[:0]
	now := time.Now()
	for _, c := range x.batch {
		node := c.node.Load()
		if node == nil && c.stillWaits(now) {
			var err error
			if node, err = b.cluster.MasterForKey(ctx, slotKeys()[c.slot]); err == nil {
				c.node.Store(node)
			}
		}
		if node != nil && !slices.Contains(seen, node) {
			seen = append(seen, node)
		}
	}
	if !x.share {
		n := int32(len(seen))
		b.masters.Store(n)
		for m := b.mostMasters.Load(); n > m && !b.mostMasters.CompareAndSwap(m, n); {
			m = b.mostMasters.Load()
		}
	}
	if len(seen) < 2 {
		return 0
	}
	first := seen[0]
	var started [8]*execScratch
	out := started[:0]
	b.mu.Lock()
	for _, node := range seen[1:] {
		share := x.shareBuf[:0]
		for _, c := range x.batch {
			if c.node.Load() == node {
				share = append(share, c)
			}
		}
		x.shareBuf = share[:0]
		handed += len(share)
		if y := b.newShare(share, now); y != nil {
			out = append(out, y)
		}
		clear(share)
	}
	kept := x.batch[:0]
	for _, c := range x.batch {
		if node := c.node.Load(); node == nil || node == first {
			kept = append(kept, c)
		}
	}
	clear(x.batch[len(kept):])
	x.batch = kept
	b.mu.Unlock()
	for _, y := range out {
		go b.flushShare(y)
	}
	return handed
}

// newShare takes an idle scratch, holding a copy of calls as its batch,
// sent now, and gives it to a flusher of its own, with b.mu held: a parked
// one, woken for it (newShare returns nil), or else one the caller starts
// (go flushShare) on the scratch it returns, once it has released b.mu.
func (b *batcher) newShare(calls []*call, now time.Time) *execScratch {
	var y *execScratch
	if k := len(b.scratch); k > 0 {
		y, b.scratch = b.scratch[k-1], b.scratch[:k-1]
	} else {
		y = &execScratch{}
		b.scratches = append(b.scratches, y)
	}
	y.own = append(y.own[:0], calls...)
	y.batch, y.sentAt = y.own, now
	b.active++ // y's flusher
	if b.parked > 0 {
		b.parked--
		b.wake <- wakeup{share: y} // see handOver
		return nil
	}
	return y
}

// flushShare sends y's share of another flusher's batch (see shareOut),
// then goes on as a flusher.
func (b *batcher) flushShare(y *execScratch) {
	b.flush(y, b.sendShare(y))
}

// sendShare sends y's share of another flusher's batch and returns how
// many of its calls still count in flight (b.inflight), as a flusher's
// batch does until its flusher next takes b.mu.
func (b *batcher) sendShare(y *execScratch) int {
	y.share = true
	sent := len(y.batch)
	sent -= b.exec(y, y.batch)
	clear(y.own) // the calls go back to their callers' pool
	y.share = false
	return sent
}
