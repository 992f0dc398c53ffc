package core

import (
	"context"
	"sync"
	"time"
)

// execContext is the context of one send: a flusher's batch, or an inline
// call. It ends (Done is closed) at the send's deadline, so go-redis gives
// up dialling or waiting for a pooled connection once nobody waits for the
// answer any more; with ContextTimeoutEnabled it also bounds the read.
//
// It is reused from send to send, so a send allocates no context and no
// timer (context.WithDeadline would, at every send: at one caller, every
// decision): arm starts a send, disarm ends it. A timer that fires late,
// after its send has ended, ends nothing: fire checks the current
// deadline.
type execContext struct {
	mu       sync.Mutex
	deadline time.Time
	armed    bool
	expired  bool
	done     chan struct{}
	timer    *time.Timer
}

// arm makes c the context of a send that ends at deadline.
func (c *execContext) arm(deadline time.Time) {
	c.mu.Lock()
	if c.done == nil || c.expired {
		c.done = make(chan struct{}) // the last one was closed
		c.expired = false
	}
	c.deadline, c.armed = deadline, true
	c.mu.Unlock()
	if c.timer == nil {
		c.timer = time.AfterFunc(time.Until(deadline), c.fire)
	} else {
		c.timer.Reset(time.Until(deadline))
	}
}

// disarm ends the send.
func (c *execContext) disarm() {
	c.mu.Lock()
	c.armed = false
	c.mu.Unlock()
	c.timer.Stop()
}

// end ends the send at once: nobody waits for its answer any more.
func (c *execContext) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed && !c.expired {
		c.expired = true
		close(c.done)
	}
}

func (c *execContext) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed && !c.expired && !time.Now().Before(c.deadline) {
		c.expired = true
		close(c.done)
	}
}

// Deadline returns the send's deadline.
func (c *execContext) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, true
}

// Done is closed when the send's deadline has passed.
func (c *execContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// Value holds nothing.
func (c *execContext) Value(any) any { return nil }

// Err is context.DeadlineExceeded once the deadline has passed.
func (c *execContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.expired {
		return context.DeadlineExceeded
	}
	return nil
}
