package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A decision is "one EVALSHA". go-redis retries a pipeline (and a command)
// whose reply timed out or whose connection died after it was written; the
// script has then already run, and would run again: one Allow consuming
// twice. sluice's scripts go out with go-redis's retries off (scriptCmd),
// and a lost reply is an error instead.
func TestDecisionIsNotExecutedTwice(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			p := startDroppingProxy(t, redistest.Options(t).Addr)
			c := redis.NewClient(&redis.Options{Addr: p.addr, ReadTimeout: 300 * time.Millisecond,
				ContextTimeoutEnabled: inline}) // default MaxRetries
			defer c.Close()
			lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(30*time.Second), WithHealthCheck(0, 0),
				WithPrefix(fmt.Sprintf("twice-%v-%d", inline, time.Now().UnixNano())))
			ctx := context.Background()
			if err := c.Ping(ctx).Err(); err != nil { // connect, and load nothing yet
				t.Fatal(err)
			}
			loadScript(t, c)
			p.mu.Lock()
			p.armed = true
			p.mu.Unlock()
			r, err := lim.Allow(ctx, "k")
			admin := redistest.Client(t)
			v, _ := admin.Get(ctx, lim.keys("k")[0]).Result()
			if err == nil && r.Remaining != 9 || fwCount(v) != 1 {
				t.Errorf("one Allow: %+v %v; Redis holds %q; want one event counted (Remaining 9, count 1)", r, err, v)
			}
		})
	}
}

// A script call that Redis refused before running it (here LOADING, as
// after a restart) is sent again, since it cannot have counted; the
// decision is then made once.
func TestScriptResentWhenItNeverRan(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			p := startDroppingProxy(t, redistest.Options(t).Addr)
			c := redis.NewClient(&redis.Options{Addr: p.addr, ContextTimeoutEnabled: inline})
			defer c.Close()
			lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(10*time.Second), WithHealthCheck(0, 0),
				WithPrefix(fmt.Sprintf("resent-%v-%d", inline, time.Now().UnixNano())))
			ctx := context.Background()
			loadScript(t, c)
			p.mu.Lock()
			p.refuse = maxSends - 1
			p.mu.Unlock()
			wantDecidedOnce(t, lim, fmt.Sprintf("one Allow after %d LOADING replies", maxSends-1))
			p.mu.Lock()
			p.refuse = maxSends
			p.mu.Unlock()
			if _, err := lim.Allow(ctx, "k"); !redis.IsLoadingError(err) {
				t.Errorf("after %d LOADING replies: %v; want the LOADING error", maxSends, err)
			}
		})
	}
}

// A failover client closes its connections to a master the sentinels have
// replaced, connections still in their handshake (HELLO) included. go-redis
// then reports the handshake's failure bare, as net.ErrClosed, and the
// script was never written: it must be sent again, not fail the call. (It
// failed calls after a Sentinel failover was over.)
func TestScriptResentWhenItsConnectionClosedInHandshake(t *testing.T) {
	// limiterClosing returns a limiter whose client's first closes
	// connections are closed before their handshake.
	limiterClosing := func(t *testing.T, inline bool, closes int32) *Limiter {
		loadScript(t, redistest.Client(t)) // every send is counted: none may go to NOSCRIPT
		var left atomic.Int32
		left.Store(closes)
		var d net.Dialer
		c := redis.NewClient(&redis.Options{
			Addr:                  redistest.Options(t).Addr,
			ContextTimeoutEnabled: inline,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				cn, err := d.DialContext(ctx, network, addr)
				if err == nil && left.Add(-1) >= 0 {
					cn.Close()
				}
				return cn, err
			},
		})
		t.Cleanup(func() { c.Close() })
		return newOn(t, c, FixedWindow, PerHour(10), WithTimeout(10*time.Second), WithHealthCheck(0, 0),
			WithPrefix(fmt.Sprintf("handshake-%v-%d", inline, time.Now().UnixNano())))
	}
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			ctx := context.Background()
			lim := limiterClosing(t, inline, maxSends-1)
			wantDecidedOnce(t, lim, fmt.Sprintf("one Allow after %d connections closed in their handshake", maxSends-1))
			lim = limiterClosing(t, inline, maxSends)
			if _, err := lim.Allow(ctx, "k"); !errors.Is(err, net.ErrClosed) {
				t.Errorf("after %d connections closed in their handshake: %v; want net.ErrClosed", maxSends, err)
			}
		})
	}
}

// wantDecidedOnce makes one Allow of key "k" on a FixedWindow limit of 10
// and checks that it succeeded and was counted exactly once.
func wantDecidedOnce(t *testing.T, lim *Limiter, what string) {
	t.Helper()
	ctx := context.Background()
	r, err := lim.Allow(ctx, "k")
	v, _ := redistest.Client(t).Get(ctx, lim.keys("k")[0]).Result()
	if err != nil || r.Remaining != 9 || fwCount(v) != 1 {
		t.Errorf("%s: %+v %v; Redis holds %q; want it decided once (Remaining 9, count 1)", what, r, err, v)
	}
}
