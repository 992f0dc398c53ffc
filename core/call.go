package core

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// call is one queued command: the policy script (EVALSHA, EVAL on NOSCRIPT),
// a DEL of keys (Reset) or a SET (the health probe's write).
//
// A call waits until one of its flusher, the watchdog or its caller claims
// it (claim; see the invariants in batcher.go).
//
// Script calls are pooled. A caller whose call was answered puts it back
// once it has read the answer; the flusher touches an answered call no more
// after signalling. A call that expired or was given up is never put back:
// it may still sit in a batch being sent. Nor is a DEL or a probe's SET,
// answered while its batch's scripts are still out.
type call struct {
	kind callKind
	keys []keyArg      // the request's keys, one per rule (their buffers are kept)
	args []interface{} // the request's own script argument: its cost, negated for Peek
	unit bool          // it consumes 1 (Allow): a script call of such requests only needs their keys
	slot int           // the Redis Cluster slot of its keys, on a ClusterClient (see groupNode)
	// node: the cluster master it is sent to, once named (see groupOf):
	// its caller reads it, even when the call was not answered
	node atomic.Pointer[redis.Client]

	scratch []interface{} // the inline path's full argument list

	// refused: on a cluster, when its master answered it (the last reply
	// its sends got), its error should it time out (see slotCmd)
	refused atomic.Pointer[timeoutError]

	deadline time.Time     // when the caller stops waiting; zero: never
	done     chan struct{} // buffered: signalled once per use, by whoever claims it
	ctx      execContext   // the inline path's context
	res      []int64
	err      error
	state    atomic.Uint32 // callWaiting until claimed
}

// The states of a call.
const (
	callWaiting   uint32 = iota
	callAnswered         // by its flusher: res and err hold the answer
	callExpired          // by the watchdog: its deadline passed first
	callAbandoned        // by its caller: its context ended first
)

// claim moves c from waiting to s, and reports whether it did: false when
// someone else claimed c first.
func (c *call) claim(s uint32) bool {
	return c.state.CompareAndSwap(callWaiting, s)
}

// stillWaits reports whether c's caller still waits at now. A call past its
// deadline is expired here and then, rather than sent in the moments before
// the watchdog's next round: its caller would be told it failed while
// Redis counted it.
func (c *call) stillWaits(now time.Time) bool {
	if c.state.Load() != callWaiting {
		return false
	}
	if !c.deadline.IsZero() && !now.Before(c.deadline) {
		if c.claim(callExpired) {
			c.done <- struct{}{} // expired calls are never reused: signalled at once
		}
		return false
	}
	return true
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// getCall returns an empty call of kind k.
func getCall(k callKind) *call {
	c := callPool.Get().(*call)
	c.kind = k
	c.keys, c.args, c.unit = c.keys[:0], c.args[:0], false
	c.res, c.err = c.res[:0], nil
	c.node.Store(nil)
	c.state.Store(callWaiting)
	return c
}

// putCall returns a call whose done signal its caller has received, and
// whose reply the caller has finished reading.
func putCall(c *call) {
	c.res = c.res[:0]
	if c.refused.Load() != nil {
		c.refused.Store(nil)
	}
	clear(c.args) // let go of the boxed arguments
	callPool.Put(c)
}

type callKind uint8

const (
	callScript callKind = iota
	callDel
	callProbe // the health probe's write: SET <its key> 1 PX 1000
)
