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
type batcher struct {
	client    redis.UniversalClient
	flushers  int // pipelines allowed in flight at once
	maxBatch  int
	execLimit time.Duration // bound of one pipeline's context

	mu      sync.Mutex
	pending []*call
	active  int
}

// call is one queued command: the policy script (EVALSHA, EVAL on NOSCRIPT),
// a DEL of keys (Reset) or a PING (the health probe).
type call struct {
	kind callKind
	keys []string
	args []interface{}

	deadline  time.Time // the caller's; zero when it has none
	done      chan struct{}
	res       []int64
	err       error
	abandoned atomic.Bool
}

type callKind uint8

const (
	callScript callKind = iota
	callDel
	callPing
)

func newBatcher(client redis.UniversalClient) *batcher {
	return &batcher{client: client, flushers: 2, maxBatch: 512, execLimit: 30 * time.Second}
}

// do queues c and waits until it is answered or ctx is done.
func (b *batcher) do(ctx context.Context, c *call) error {
	c.done = make(chan struct{})
	c.deadline, _ = ctx.Deadline()
	b.mu.Lock()
	b.pending = append(b.pending, c)
	start := b.active < b.flushers
	if start {
		b.active++
	}
	b.mu.Unlock()
	if start {
		go b.flush()
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		c.abandoned.Store(true)
		return ctx.Err()
	}
}

// flush sends batches until the queue is empty.
func (b *batcher) flush() {
	for {
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.active--
			b.mu.Unlock()
			return
		}
		batch := b.pending
		if len(batch) > b.maxBatch {
			batch = batch[:b.maxBatch:b.maxBatch]
			b.pending = b.pending[b.maxBatch:]
		} else {
			b.pending = nil
		}
		b.mu.Unlock()
		b.exec(batch)
	}
}

// exec sends one batch as a pipeline and answers every call in it. Errors
// are per call: one call's error never fails another.
//
// The pipeline's context ends when the last of its callers stops waiting:
// go-redis then stops dialling or waiting for a connection, so a decision
// nobody waits for any more is not sent late (say, to a Redis that has just
// restarted) to consume quota for a request long gone.
func (b *batcher) exec(batch []*call) {
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
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
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
		close(c.done)
	}
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
