package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestWait(t *testing.T) {
	c := redistest.Client(t)
	prefix := fmt.Sprintf("wait-%d", time.Now().UnixNano())
	ctx := context.Background()

	t.Run("waits for the refill", func(t *testing.T) {
		lim := newOn(t, c, TokenBucket, Limit{Rate: 1, Period: 50 * ms}, WithPrefix(prefix))
		for i := 0; i < 3; i++ {
			if err := lim.Wait(ctx, "jobs"); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("leaky bucket sleeps its delay", func(t *testing.T) {
		lim := newOn(t, c, LeakyBucket, Limit{Rate: 1, Period: 30 * ms, Burst: 3}, WithPrefix(prefix))
		for i := 0; i < 4; i++ {
			if err := lim.Wait(ctx, "jobs"); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("a wait past the deadline fails at once", func(t *testing.T) {
		lim := newOn(t, c, GCRA, PerHour(1), WithPrefix(prefix))
		lim.Allow(ctx, "slow")
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		err := lim.Wait(dctx, "slow")
		if !errors.Is(err, context.DeadlineExceeded) || dctx.Err() != nil {
			t.Errorf("got %v (context: %v), want an immediate DeadlineExceeded", err, dctx.Err())
		}
	})
	t.Run("a canceled context stops the wait", func(t *testing.T) {
		lim := newOn(t, c, GCRA, PerHour(1), WithPrefix(prefix))
		lim.Allow(ctx, "canceled")
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(20*ms, cancel)
		if err := lim.Wait(cctx, "canceled"); !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	})
	t.Run("cost above capacity fails at once", func(t *testing.T) {
		lim := newOn(t, c, GCRA, PerHour(1), WithPrefix(prefix))
		if err := lim.WaitN(ctx, "k", 2); !errors.Is(err, ErrCostExceedsLimit) {
			t.Errorf("got %v", err)
		}
	})
}

// A LeakyBucket WaitN whose context ends while it waits its turn says that
// it was counted.
func TestWaitCanceledWhileHeldSaysCounted(t *testing.T) {
	// Canceled 50ms after the second Wait's request is admitted (the
	// observer sees it before WaitN waits its turn), however long Redis
	// takes to admit it: while WaitN waits its turn, a minute away.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var admitted atomic.Int32
	lim := newOn(t, redistest.Client(t), LeakyBucket, Limit{Rate: 1, Period: time.Minute, Burst: 5},
		WithPrefix(fmt.Sprintf("wait-held-%d", time.Now().UnixNano())),
		WithObserver(func(e Event) {
			if e.Allowed && admitted.Add(1) == 2 {
				time.AfterFunc(50*time.Millisecond, cancel)
			}
		}))
	if err := lim.Wait(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	err := lim.Wait(ctx, "k") // admitted, its turn a minute away
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "counted") {
		t.Errorf("canceled while held: %v; want context.Canceled, saying it was counted", err)
	}
}

// A LeakyBucket WaitN whose turn comes after the deadline fails at once,
// and takes no place in the queue, even when a place frees before the
// deadline: the turn of a request admitted then is still when the queue
// ahead of it has drained (the denial's ResetAfter), so sleeping to its
// RetryAfter would only take a place its caller can never use.
func TestWaitLeakyTurnPastDeadlineFailsAtOnce(t *testing.T) {
	for _, maxDelay := range []time.Duration{-1, 3 * time.Second} {
		t.Run(fmt.Sprint("maxDelay=", maxDelay), func(t *testing.T) {
			var admitted atomic.Int32
			opts := []Option{WithPrefix(fmt.Sprintf("wait-turn-%d", time.Now().UnixNano())),
				WithObserver(func(e Event) {
					if e.Allowed {
						admitted.Add(1)
					}
				})}
			if maxDelay >= 0 {
				opts = append(opts, WithMaxDelay(maxDelay))
			}
			// One a second, five queued: the queue drains in about 5s, and
			// a place frees within 2s.
			lim := newOn(t, redistest.Client(t), LeakyBucket, Limit{Rate: 1, Period: time.Second, Burst: 5}, opts...)
			ctx := context.Background()
			for i := 0; ; i++ {
				res, err := lim.Allow(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if !res.Allowed {
					break
				}
			}
			filled := admitted.Load()
			dctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
			defer cancel()
			err := lim.Wait(dctx, "k")
			if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "admitted") || dctx.Err() != nil {
				t.Errorf("got %v (context: %v), want an immediate DeadlineExceeded", err, dctx.Err())
			}
			if n := admitted.Load() - filled; n != 0 {
				t.Errorf("Wait took %d place(s) in the queue for a turn past its deadline", n)
			}
		})
	}
}
