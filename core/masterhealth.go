package core

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// masterHealth is the health check of a limiter on a Redis Cluster: a
// breaker (see health) per master, beside the limiter's own. A decision
// counts against the breaker of the master its batch sent it to, and
// while that breaker is open the decisions on that master's keys are
// answered at once by the failure mode, while those of the live masters
// still go to Redis. (Each master's share of a batch is sent on its own:
// see shareOut. Before that, a dead master held the live masters'
// decisions of the same batch, and a breaker per master could not help.)
//
// A decision whose master is not known (the client had no slot map when
// its batch was sent) counts against the limiter's own breaker, as on a
// single server.
type masterHealth struct {
	l       *Limiter
	cluster *redis.ClusterClient

	// byAddr is read at every decision, without a lock; a new master's
	// breaker is added to a copy, under mu.
	byAddr atomic.Pointer[map[string]*masterBreaker]
	mu     sync.Mutex
	closed bool // Close was called: no new breaker

	// open counts the breakers open, as their hooks report it: while it
	// is 0, a decision looks for no master's breaker before it is sent.
	// (Close stops every breaker, closed, without reporting, then sets 0.)
	open atomic.Int32
}

// masterBreaker is the breaker of one master.
type masterBreaker struct {
	health
	// slot: a slot of this master's, of the latest decision that failed
	// on it or was answered by its open breaker. The probe writes a key
	// of that slot: once a replica has taken the master's slots over, the
	// probe reaches it, and the breaker closes.
	slot atomic.Int32
}

// maxMasters bounds the breakers a limiter keeps: one per master address
// it has sent to, more only if masters keep coming back on new addresses.
// Beyond it, the decisions of new masters count against the limiter's own
// breaker.
const maxMasters = 1024

// of returns the breaker of node, made on node's first decision, or nil
// once Close was called or maxMasters are kept.
func (m *masterHealth) of(node *redis.Client) *masterBreaker {
	addr := node.Options().Addr
	if by := m.byAddr.Load(); by != nil {
		if h := (*by)[addr]; h != nil {
			return h
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.byAddr.Load()
	if old != nil && (*old)[addr] != nil {
		return (*old)[addr]
	}
	if m.closed || old != nil && len(*old) >= maxMasters {
		return nil
	}
	h := &masterBreaker{}
	h.health = m.l.newHealth(func(ctx context.Context) error {
		slot := int(h.slot.Load())
		return m.l.probeAt(ctx, m.l.slotProbeKey(slot), slot)
	}, (*masterChanges)(m))
	by := make(map[string]*masterBreaker, 1)
	if old != nil {
		maps.Copy(by, *old)
	}
	by[addr] = h
	m.byAddr.Store(&by)
	return h
}

// openFor returns the breaker of the master that serves key's slot when
// it is open, and nil otherwise; the breaker's probe then writes a key of
// that slot. It finds the slot, and asks the client's slot map, only
// while some breaker is open: the map is there by then (a breaker is made
// for a master the map named), so the lookup does not wait on Redis.
func (m *masterHealth) openFor(key string) *health {
	if m.open.Load() <= 0 {
		return nil
	}
	slot := clusterSlot(storedKey(key))
	node, err := m.cluster.MasterForKey(context.Background(), slotKeys()[slot])
	if err != nil {
		return nil
	}
	by := m.byAddr.Load()
	if by == nil {
		return nil
	}
	h := (*by)[node.Options().Addr]
	if h == nil || !h.unhealthy() {
		return nil
	}
	h.slot.Store(int32(slot))
	return &h.health
}

// masterChanges is what a master's breaker reports to: it counts the
// breakers open, at once (see openFor), then passes the change on to the
// limiter's hook (see healthChanges).
type masterChanges masterHealth

func (m *masterChanges) note(s Health, err error) bool {
	if s == Unhealthy {
		m.open.Add(1)
	} else {
		m.open.Add(-1)
	}
	return m.l.changes.note(s, err)
}

func (m *masterChanges) deliver() { m.l.changes.deliver() }

// unhealthy reports whether any master's breaker is open.
func (m *masterHealth) unhealthy() bool {
	if by := m.byAddr.Load(); by != nil {
		for _, h := range *by {
			if h.unhealthy() {
				return true
			}
		}
	}
	return false
}

// close stops every master's breaker for good, each closed without
// reporting (see health.close), then counts none open: a breaker's change
// racing this one is counted before its breaker stops, or not at all.
func (m *masterHealth) close() {
	m.mu.Lock()
	m.closed = true
	by := m.byAddr.Load()
	m.mu.Unlock()
	if by != nil {
		for _, h := range *by {
			h.close()
		}
	}
	m.open.Store(0)
}

// healthChanges reports a limiter's changes of health to its hook, one at
// a time and in order: Unhealthy when a first breaker opens (the
// limiter's own or, on a cluster, a master's), Healthy when the last open
// one closes. Each breaker reports its own changes in order (see
// health.note), each Unhealthy before its Healthy.
//
// The hook is called with no lock held: a hook that decides (to log, say)
// may make a breaker open, another or the one it is told about, whose
// report must not wait for the hook to return. A change is queued (note),
// and whoever finds no one delivering delivers the queue, in order, one
// change at a time; a change noted meanwhile, from the hook or another
// goroutine, is delivered after.
type healthChanges struct {
	mu         sync.Mutex
	open       int
	fn         func(Health, error)
	queue      []healthChange
	delivering bool
	closed     bool // Close was called: nothing more is queued or delivered
}

// close drops what is queued and ends the reports: a change noted before
// Close and still queued never reaches the hook. (One a deliverer has
// already taken from the queue is still handed to it, once, and that call
// may begin after Close returns: Close cannot wait for it, as the hook
// may be what calls Close.)
func (c *healthChanges) close() {
	c.mu.Lock()
	c.closed, c.queue = true, nil
	c.mu.Unlock()
}

type healthChange struct {
	h   Health
	err error
}

// note counts a breaker's change and queues it when it changes the
// limiter's health, and reports whether the caller is to deliver the
// queue: no one else is delivering. It calls no hook.
func (c *healthChanges) note(s Health, err error) (deliver bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := c.open
	if s == Unhealthy {
		c.open++
	} else {
		c.open--
	}
	if c.fn == nil || c.closed || (before == 0) == (c.open == 0) {
		return false
	}
	c.queue = append(c.queue, healthChange{s, err})
	if c.delivering {
		return false
	}
	c.delivering = true
	return true
}

// deliver calls the hook with each change queued, until none is left.
// Should the hook panic, the changes after it are still delivered, and
// then the (first) panic goes on up the deliverer's goroutine: a caller's
// or the probe's, whichever is delivering (see WithHealthHook). Should it
// end its goroutine (runtime.Goexit), the changes after it are delivered
// on the way out. No change is dropped or left waiting, but those Close
// drops (see close), and none is delivered on a goroutine made for it.
func (c *healthChanges) deliver() {
	var first any
	panicked, done := false, false
	defer func() {
		if !done { // the hook ended its goroutine: deliver the rest on the way out
			c.deliver()
		}
	}()
	for {
		c.mu.Lock()
		if len(c.queue) == 0 || c.closed {
			c.queue, c.delivering, done = nil, false, true
			c.mu.Unlock()
			break
		}
		next := c.queue[0]
		c.queue = c.queue[1:]
		c.mu.Unlock()
		if p, ok := c.call(next); !ok && !panicked {
			first, panicked = p, true
		}
	}
	if panicked {
		panic(first)
	}
}

// call tells the hook of one change, and reports whether it returned;
// when it panicked, with what (nil for panic(nil) under
// GODEBUG=panicnil=1, hence the flag).
func (c *healthChanges) call(ch healthChange) (panicked any, returned bool) {
	defer func() {
		if !returned {
			panicked = recover()
		}
	}()
	c.fn(ch.h, ch.err)
	return nil, true
}

// slotProbeKey returns the key a master's probe writes: one of slot, under
// the limiter's prefix. Its hash tag may be a user key's, but no rule's
// key ends "}:#probe:…" (theirs end "}:<fingerprint>:<rule index>").
func (l *Limiter) slotProbeKey(slot int) string {
	return l.prefix + ":{" + slotKeys()[slot] + "}:#probe:" + l.fp
}
