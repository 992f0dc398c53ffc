package core

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// masterHealth is the health check of a limiter on a Redis Cluster: one
// breaker (see health) per master, so that a master that is down takes
// only its own keys' decisions to the failure mode, and those of the live
// masters still go to Redis. A key's decisions answer to the breaker of
// the master that the client's slot map names for its slot; when a
// replica takes a dead master's slots over, they answer to the replica's.
// Each breaker's probe writes a key of the slot whose decisions opened it,
// on whichever master serves that slot by then.
//
// The limiter reports Unhealthy while any of its breakers is open, and the
// health hook sees the changes of that: the first breaker to open, and
// the last to close.
type masterHealth struct {
	l       *Limiter
	cluster *redis.ClusterClient

	// byAddr is read at every decision, without a lock; a new master's
	// breaker is added to a copy, under mu.
	byAddr atomic.Pointer[map[string]*health]
	mu     sync.Mutex
	open   int  // breakers open
	closed bool // Close was called: no new breaker

	hookMu sync.Mutex // the hook sees the changes one at a time, in order
}

// maxMasters bounds the breakers a limiter keeps: one per master address
// it has seen, more only if masters keep coming back on new addresses.
// Beyond it, keys of new masters answer to the limiter's own breaker.
const maxMasters = 1024

// of returns the breaker of the master serving slot, or the limiter's own
// when the client cannot name one (no slot map yet).
func (m *masterHealth) of(ctx context.Context, slot int) *health {
	node, err := m.cluster.MasterForKey(ctx, slotKeys()[slot])
	if err != nil {
		return &m.l.health
	}
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
		return &m.l.health
	}
	h := &health{}
	key := m.l.slotProbeKey(slot)
	m.l.initHealth(h, func(ctx context.Context) error { return m.l.probeAt(ctx, key) }, m.hook)
	by := make(map[string]*health, 1)
	if old != nil {
		maps.Copy(by, *old)
	}
	by[addr] = h
	m.byAddr.Store(&by)
	return h
}

// hook reports the limiter's changes: Unhealthy when a first breaker
// opens, Healthy when the last open one closes.
func (m *masterHealth) hook(s Health, err error) {
	m.hookMu.Lock()
	defer m.hookMu.Unlock()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	before := m.open
	if s == Unhealthy {
		m.open++
	} else {
		m.open--
	}
	after := m.open
	m.mu.Unlock()
	if fn := m.l.opts.onHealth; fn != nil && (before == 0) != (after == 0) {
		fn(s, err)
	}
}

// unhealthy reports whether any breaker is open.
func (m *masterHealth) unhealthy() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.open > 0
}

// close stops every breaker for good.
func (m *masterHealth) close() {
	m.mu.Lock()
	m.closed, m.open = true, 0 // closed: decisions go to Redis, with no breaker
	by := m.byAddr.Load()
	m.mu.Unlock()
	if by != nil {
		for _, h := range *by {
			h.close()
		}
	}
}
