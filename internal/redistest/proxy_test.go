package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The proxy forwards; a lost reply belongs to a command that ran; a hung
// connection answers nothing while a new one works.
func TestProxy(t *testing.T) {
	p := StartProxy(t, Options(t).Addr)
	ctx := context.Background()
	direct := Client(t)
	key := fmt.Sprintf("proxy-%d", time.Now().UnixNano())
	defer direct.Del(ctx, key)
	for _, mode := range []LostMode{LostClose, LostReset, LostHang} {
		c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("through the proxy: %v", err)
		}
		before, _ := direct.Get(ctx, key).Int()
		p.LoseReplies(1, mode, "incr")
		err := c.Incr(ctx, key).Err()
		var ne net.Error
		if err == nil || mode == LostHang && !(errors.As(err, &ne) && ne.Timeout()) {
			t.Errorf("mode %d: INCR with its reply lost: %v; want an error (a timeout when hung)", mode, err)
		}
		if after, _ := direct.Get(ctx, key).Int(); after != before+1 {
			t.Errorf("mode %d: INCR with its reply lost moved the counter from %d to %d; want it run once", mode, before, after)
		}
		c.Close()
	}
	if p.Lost() != 3 {
		t.Errorf("%d replies lost; want 3", p.Lost())
	}

	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n := p.HangOpen(); n < 1 {
		t.Fatalf("%d connections hung; want the client's", n)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Error("PING on a hung connection answered")
	}
	if err := c.Ping(ctx).Err(); err != nil { // the hung one was dropped: a new one
		t.Errorf("PING on a new connection: %v", err)
	}
}
