package core

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The batcher coalesces concurrent decisions of one Limiter into pipelines.
//
// A caller queues its call and waits for its own result, or for its own
// deadline, whichever comes first. While no pipeline is in flight, a flusher
// goroutine sends what is queued at once; while one is in flight, the calls
// arriving meanwhile gather and go together in the next. There is no timer:
// a lone caller is sent immediately, and a crowd is batched naturally by the
// round trip it waits for.
//
// Because the caller waits on a channel rather than on the connection, its
// deadline holds whatever the client's own timeouts are (go-redis ignores
// context deadlines on reads unless ContextTimeoutEnabled is set). A call
// abandoned before its pipeline is built is never sent.
//
// When the client does enforce context deadlines (ContextTimeoutEnabled),
// a caller that finds nothing in flight sends its call itself, from its own
// goroutine: the deadline holds just the same, and a lone caller is spared
// the handoff to a flusher and back. Callers arriving meanwhile queue for a
// flusher as usual.
type batcher struct {
	client    redis.UniversalClient
	flushers  int // pipelines allowed in flight at once
	maxBatch  int
	execLimit time.Duration // bound of one pipeline's context
	inline    bool          // the client enforces context deadlines

	mu      sync.Mutex
	pending []*call
	spare   []*call // an emptied batch, reused as the next pending slice
	active  int
}

// call is one queued command: the policy script (EVALSHA, EVAL on NOSCRIPT),
// a DEL of keys (Reset) or a PING (the health probe).
//
// Calls are pooled. The flusher touches a call until it signals done, and
// never after; so a caller that received done may put its call back. A
// caller that gave up may not: the flusher may still be using it.
type call struct {
	kind callKind
	keys []string
	args []interface{}

	deadline  time.Time     // when the caller stops waiting; zero: never
	done      chan struct{} // buffered: the flusher signals once per use
	ctx       execContext   // the inline path's context
	res       []int64
	err       error
	abandoned atomic.Bool
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// getCall returns an empty call of kind k.
func getCall(k callKind) *call {
	c := callPool.Get().(*call)
	c.kind = k
	c.keys, c.args = c.keys[:0], c.args[:0]
	c.res, c.err = nil, nil
	c.abandoned.Store(false)
	return c
}

// putCall returns a call whose done signal its caller has received.
func putCall(c *call) {
	c.res = nil
	clear(c.args) // let go of the boxed arguments
	callPool.Put(c)
}

var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

type callKind uint8

const (
	callScript callKind = iota
	callDel
	callPing
)

func newBatcher(client redis.UniversalClient) *batcher {
	return &batcher{client: client, flushers: 2, maxBatch: 512, execLimit: 30 * time.Second, inline: enforcesDeadlines(client)}
}

// enforcesDeadlines reports whether go-redis itself ends a command at its
// context's deadline.
func enforcesDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// do queues c and waits until it is answered, ctx is done, or timeout has
// passed (timeout <= 0: no bound but ctx's). It reports whether c was
// answered; when it was not, the caller must not reuse c.
func (b *batcher) do(ctx context.Context, timeout time.Duration, c *call) (answered bool, err error) {
	c.deadline = time.Time{}
	if timeout > 0 {
		c.deadline = time.Now().Add(timeout)
	}
	if d, ok := ctx.Deadline(); ok && (c.deadline.IsZero() || d.Before(c.deadline)) {
		c.deadline = d
	}
	b.mu.Lock()
	if b.inline && b.active == 0 && !c.deadline.IsZero() {
		b.active++ // callers arriving meanwhile queue behind this one
		b.mu.Unlock()
		return b.sendInline(c)
	}
	b.pending = append(b.pending, c)
	start := b.active < b.flushers
	if start {
		b.active++
	}
	b.mu.Unlock()
	if start {
		go b.flush()
	}
	var expired <-chan time.Time
	if !c.deadline.IsZero() {
		t := timerPool.Get().(*time.Timer)
		t.Reset(time.Until(c.deadline))
		defer func() { t.Stop(); timerPool.Put(t) }()
		expired = t.C
	}
	select {
	case <-c.done:
		return true, c.err
	case <-expired:
		c.abandoned.Store(true)
		return false, context.DeadlineExceeded
	case <-ctx.Done():
		c.abandoned.Store(true)
		return false, ctx.Err()
	}
}

// sendInline sends c alone from the caller's goroutine, as a plain command
// (no pipeline): go-redis ends it at c's deadline. Then it hands what queued
// meanwhile to a flusher.
func (b *batcher) sendInline(c *call) (bool, error) {
	c.ctx.deadline = c.deadline
	ctx := &c.ctx
	switch c.kind {
	case callScript:
		cmd := b.client.EvalSha(ctx, policyScript.Hash(), c.keys, c.args...)
		if isNoScript(cmd.Err()) {
			cmd = b.client.Eval(ctx, scriptSrc, c.keys, c.args...)
		}
		c.res, c.err = cmd.Int64Slice()
	case callDel:
		c.err = b.client.Del(ctx, c.keys...).Err()
	case callPing:
		c.err = b.client.Ping(ctx).Err()
	}
	b.mu.Lock()
	start := len(b.pending) > 0
	if !start {
		b.active--
	}
	b.mu.Unlock()
	if start {
		go b.flush() // takes over this caller's place in active
	}
	return true, c.err
}

// flush sends batches until the queue is empty.
func (b *batcher) flush() {
	ctx := &execContext{}
	var done []*call // the batch just sent, to give back as spare
	for {
		b.mu.Lock()
		if done != nil && b.spare == nil {
			clear(done)
			b.spare = done[:0]
		}
		if len(b.pending) == 0 {
			b.active--
			b.mu.Unlock()
			return
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
		b.mu.Unlock()
		b.exec(ctx, batch)
	}
}

// execContext is the context of one flusher's pipelines: only a deadline,
// reused from batch to batch, so sending a batch allocates no context and
// no timer. go-redis reads the deadline to give up dialling and waiting for
// a connection; Done is nil, as for context.Background.
type execContext struct{ deadline time.Time }

func (c *execContext) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *execContext) Done() <-chan struct{}       { return nil }
func (c *execContext) Value(any) any               { return nil }
func (c *execContext) Err() error {
	if time.Now().After(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// exec sends one batch as a pipeline and answers every call in it. Errors
// are per call: one call's error never fails another.
//
// The pipeline's context ends when the last of its callers stops waiting:
// go-redis then stops dialling or waiting for a connection, so a decision
// nobody waits for any more is not sent late (say, to a Redis that has just
// restarted) to consume quota for a request long gone.
func (b *batcher) exec(ctx *execContext, batch []*call) {
	deadline := time.Now().Add(b.execLimit)
	latest := time.Time{}
	for _, c := range batch {
		if c.deadline.IsZero() {
			latest = deadline
			break
		}
		if c.deadline.After(latest) {
			latest = c.deadline
		}
	}
	if latest.After(deadline) {
		latest = deadline
	}
	ctx.deadline = latest
	cmds := make([]redis.Cmder, len(batch))
	pipe := b.client.Pipeline()
	sent := 0
	for i, c := range batch {
		if c.abandoned.Load() {
			continue
		}
		switch c.kind {
		case callScript:
			cmds[i] = pipe.EvalSha(ctx, policyScript.Hash(), c.keys, c.args...)
		case callDel:
			cmds[i] = pipe.Del(ctx, c.keys...)
		case callPing:
			cmds[i] = pipe.Ping(ctx)
		}
		sent++
	}
	if sent > 0 {
		_, _ = pipe.Exec(ctx) // errors are read per command below
	}
	// Redis lost its scripts (a restart, SCRIPT FLUSH, a failover to a
	// replica that never saw them): send those calls again with the source.
	var retry redis.Pipeliner
	for i, c := range batch {
		if cmds[i] != nil && c.kind == callScript && isNoScript(cmds[i].Err()) {
			if retry == nil {
				retry = b.client.Pipeline()
			}
			cmds[i] = retry.Eval(ctx, scriptSrc, c.keys, c.args...)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	for i, c := range batch {
		switch cmd := cmds[i].(type) {
		case nil:
			continue // abandoned: nobody is waiting
		case *redis.Cmd:
			c.res, c.err = cmd.Int64Slice()
		default:
			c.err = cmd.Err()
		}
		c.done <- struct{}{} // the last touch of c
	}
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
