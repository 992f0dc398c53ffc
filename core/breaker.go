package core

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// health is a small circuit breaker: threshold consecutive failures open it;
// while open a single goroutine probes Redis with growing pauses and closes
// it once the probe succeeds. The probe asks what decisions need (see
// Limiter.probe): a Redis that answers PING but refuses writes stays open.
type health struct {
	threshold  int
	maxBackoff time.Duration
	probe      func(context.Context) error
	// changes is told of each opening and closing (nil: no one listens).
	// They are noted with hookMu held, so that they are queued in the
	// order they happened, and delivered to the hook after it is
	// released: a hook that decides may reopen this very breaker (its
	// decision failing as Redis answers the probe but not decisions in
	// time), and its report must not wait for the hook that caused it.
	changes changeReporter
	hookMu  sync.Mutex

	failures atomic.Int32
	open     atomic.Bool
	mu       sync.Mutex
	lastErr  error // ErrUnavailable wrapping the last failure, built once per failure
	// The pause the probes had reached when they last closed the breaker,
	// and when: see firstBackoff.
	lastBackoff time.Duration
	closedAt    time.Time

	stopped atomic.Bool   // the limiter is closed: no breaker, no probe
	stop    chan struct{} // closed by Close, ends a probe's pause
}

func (h *health) unhealthy() bool { return h.open.Load() }

// err is the error of decisions made while Redis is unhealthy: the same
// value for all of them, so an outage allocates nothing per decision.
func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastErr
}

func (h *health) success() {
	if h.failures.Load() != 0 {
		h.failures.Store(0)
	}
}

// failure counts err; the threshold-th consecutive one opens the breaker.
func (h *health) failure(err error) {
	if h.threshold <= 0 || h.stopped.Load() || int(h.failures.Add(1)) < h.threshold {
		return
	}
	h.mu.Lock()
	h.lastErr = &unavailableError{err}
	h.mu.Unlock()
	if h.open.CompareAndSwap(false, true) {
		// The probe starts before the hook is told: a hook that panics
		// (recovered up the caller's stack) must not leave the breaker
		// open for good. The change is noted first, so the probe's
		// Healthy comes after it.
		deliver := h.note(Unhealthy, err, nil)
		go h.recover()
		if deliver {
			h.changes.deliver()
		}
	}
}

// changeReporter is what a breaker tells of its changes: note queues one
// (with the breaker's hookMu held: it calls no code of the user's) and
// reports whether the caller is to deliver the queue; deliver hands what
// is queued to the hook, in order.
type changeReporter interface {
	note(s Health, err error) (deliver bool)
	deliver()
}

// note does change and notes s, both with hookMu held, and reports
// whether the caller is to deliver it, with no lock held (unless another
// goroutine is delivering already, the hook itself say, up the stack,
// which then delivers it after what came before it).
func (h *health) note(s Health, err error, change func()) (deliver bool) {
	h.hookMu.Lock()
	defer h.hookMu.Unlock()
	if h.stopped.Load() {
		return false // closed: no breaker to change, nobody to tell (see close)
	}
	if change != nil {
		change()
	}
	return h.changes != nil && h.changes.note(s, err)
}

// minBackoff is the first pause of the probes.
const minBackoff = 50 * time.Millisecond

// firstBackoff is the first pause of a new round of probes at now. A
// breaker reopened soon after the probes closed it (within a second, or
// four of their last pauses) starts where they were, doubled: Redis answers
// the probe but not the decisions (too slowly for the timeout, or a Cluster
// node other than the probe's refuses them), and starting at 50ms again
// would open and close the breaker twenty times a second, each time costing
// the decisions that reopen it.
func (h *health) firstBackoff(now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closedAt.IsZero() || now.Sub(h.closedAt) >= max(time.Second, 4*h.lastBackoff) {
		return minBackoff
	}
	return min(2*h.lastBackoff, max(h.maxBackoff, minBackoff))
}

// recover probes until Redis takes decisions again, then closes the breaker.
func (h *health) recover() {
	backoff := h.firstBackoff(time.Now())
	for {
		// ±25% jitter, so instances do not probe in lockstep.
		pause := time.NewTimer(backoff*3/4 + time.Duration(rand.Int64N(int64(backoff)/2+1)))
		select {
		case <-pause.C:
		case <-h.stop:
			pause.Stop()
			h.open.Store(false) // closed: decisions go to Redis, as without a breaker
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := h.probe(ctx)
		cancel()
		// Only a write taken closes it. A NOPERM on the probe's key proves
		// nothing: Redis checks ACLs before memory, role and the rest, so
		// an OOM or read-only Redis answers NOPERM too.
		if err == nil {
			h.mu.Lock()
			h.lastBackoff, h.closedAt = backoff, time.Now()
			h.mu.Unlock()
			// Closed with the hook's lock held: a caller reopening the
			// breaker meanwhile notes Unhealthy after this Healthy, not
			// before it.
			deliver := h.note(Healthy, nil, func() {
				h.failures.Store(0)
				h.open.Store(false)
			})
			if deliver {
				h.changes.deliver()
			}
			return
		}
		if errors.Is(err, redis.ErrClosed) {
			return // the client is closed for good: nothing to wait for
		}
		h.mu.Lock()
		h.lastErr = &unavailableError{err}
		h.mu.Unlock()
		backoff = min(2*backoff, max(h.maxBackoff, minBackoff))
	}
}

// close stops the breaker for good: it is closed (decisions go to Redis),
// a probe running ends at its next pause, or when it returns without
// changing anything or telling anyone (see note), and no failure opens it
// again. stopped is set with hookMu held: no change is noted after it.
// (Limiter.Close drops what was noted before and not yet handed to the
// hook: see healthChanges.close.)
func (h *health) close() {
	h.hookMu.Lock()
	first := h.stopped.CompareAndSwap(false, true)
	h.hookMu.Unlock()
	if first {
		close(h.stop)
	}
	// Also when a probe has ended and left it open (the client closed): no
	// breaker. A failure racing this may open it again a moment, until its
	// probe finds stop closed.
	h.open.Store(false)
}
