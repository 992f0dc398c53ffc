package core

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// trap is a dialer for a failover client: once armed, the first
// connection to target that writes an EVALSHA stalls until the client
// itself closes it. It stalls at its next read (afterDeadline false: the
// command reaches Redis and runs, its reply waits in the socket, as for a
// client slow to read it) or when go-redis sets the read deadline just
// after the write (afterDeadline true: as for a flusher descheduled between
// writing the pipeline and reading it).
type trap struct {
	target        string
	afterDeadline bool
	written       chan struct{}
	engaged       atomic.Bool // the stalled call went on after the close

	mu    sync.Mutex
	armed bool
	held  *trapConn
}

type trapConn struct {
	net.Conn
	t      *trap
	hold   atomic.Bool
	closed chan struct{}
	once   sync.Once
}

func newTrap(target string, afterDeadline bool) *trap {
	return &trap{target: target, afterDeadline: afterDeadline, written: make(chan struct{})}
}

func (t *trap) arm() {
	t.mu.Lock()
	t.armed = true
	t.mu.Unlock()
}

func (t *trap) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil || addr != t.target {
		return c, err
	}
	return &trapConn{Conn: c, t: t, closed: make(chan struct{})}, nil
}

func (c *trapConn) Write(b []byte) (int, error) {
	t := c.t
	t.mu.Lock()
	if t.armed && t.held == nil && bytes.Contains(bytes.ToLower(b), []byte("evalsha")) {
		t.held = c
		c.hold.Store(true)
		defer close(t.written)
	}
	t.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *trapConn) Read(b []byte) (int, error) {
	if !c.t.afterDeadline && c.hold.Load() {
		<-c.closed
		c.t.engaged.Store(true)
	}
	return c.Conn.Read(b)
}

func (c *trapConn) SetReadDeadline(tm time.Time) error {
	if c.t.afterDeadline && c.hold.CompareAndSwap(true, false) {
		<-c.closed
		c.t.engaged.Store(true)
	}
	return c.Conn.SetReadDeadline(tm)
}

func (c *trapConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// A decision that ran on the old master and reached the replica before a
// failover, whose reply the client had not read when the sentinels named
// the new master, fails when the failover client closes its connection
// (net.ErrClosed on the read). It is not resent: on the new master it
// would count twice.
func TestLostReplyAcrossFailoverCountsOnce(t *testing.T) {
	s := redistest.StartSentinel(t)
	decideAcrossFailover(t, s, newTrap(s.Master.Addr, false))
}

// decideAcrossFailover makes one decision on a failover client whose
// connections to the master trap makes, waits until the decision has
// reached the replica, fails the master over to it, and checks that the
// new master counted the decision once. It is skipped when the trap was
// never sprung.
func decideAcrossFailover(t *testing.T, s *redistest.Sentinel, trap *trap) {
	t.Helper()
	ctx := context.Background()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.MasterName, SentinelAddrs: []string{s.Addr},
		Dialer: trap.dial, ReadTimeout: time.Minute,
	})
	defer c.Close()
	lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(time.Minute), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("failover-once-%d", time.Now().UnixNano())))
	if r, err := lim.Allow(ctx, "warm-up"); err != nil || !r.Allowed {
		t.Fatalf("warm-up: %+v %v", r, err)
	}
	trap.arm()
	type outcome struct {
		r   Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := lim.Allow(ctx, "k")
		done <- outcome{r, err}
	}()
	select {
	case <-trap.written:
	case <-time.After(20 * time.Second):
		t.Fatal("the decision was never sent")
	}
	// It ran on the master, and reached the replica.
	key := lim.keys("k")[0]
	replica := s.Node(s.Replica.Addr)
	waitFor(t, "the decision on the replica", func() bool {
		v, _ := replica.Get(ctx, key).Result()
		return fwCount(v) == 1
	})
	if err := s.SentinelClient(t).Failover(ctx, s.MasterName).Err(); err != nil && !strings.HasPrefix(err.Error(), "INPROG") {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	var o outcome
	select {
	case o = <-done:
	case <-time.After(40 * time.Second):
		t.Fatal("the decision never returned")
	}
	if err := s.WaitMaster(ctx, s.Replica.Addr); err != nil {
		t.Fatal(err)
	}
	if !trap.engaged.Load() {
		t.Skip("the trapped connection was not closed under the call")
	}
	v, err := replica.Get(ctx, key).Result()
	if err != nil || fwCount(v) != 1 {
		t.Errorf("one Allow (answered %+v, %v) across a failover: the new master holds %q (%v); want one event counted, not two",
			o.r, o.err, v, err)
	}
}

// go-redis sets the read deadline after writing the pipeline: a connection
// the failover client closes in between fails the call with a "set"
// OpError wrapping net.ErrClosed, after the script was written and ran on
// the old master. It is not resent: on the new master, where the write
// arrived by replication, it would count twice.
func TestClosedAfterWriteIsNotResent(t *testing.T) {
	s := redistest.StartSentinel(t)
	decideAcrossFailover(t, s, newTrap(s.Master.Addr, true))
}
