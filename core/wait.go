package core

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/ctxsleep"
)

// Wait blocks until one event for key is admitted; it is WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until n events for key are admitted, then returns nil. For a
// LeakyBucket rule it also sleeps the admitted request's Delay, so the caller
// proceeds at its turn.
//
// It returns an error at once, without sleeping, when n can never be
// admitted (ErrCostExceedsLimit) or when the wait would outlast ctx's
// deadline (an error wrapping context.DeadlineExceeded): for a LeakyBucket
// rule, the wait to the request's turn, which comes no sooner than the
// queue ahead of it has drained (the denial's ResetAfter of that rule),
// even when a place in the queue frees sooner. It returns ctx's
// error when ctx is done while waiting. An admission without a Delay
// returns nil, even when ctx ends just after it was decided: it has been
// counted. A LeakyBucket request admitted with a Delay longer than the
// deadline has been counted too, and the error says so.
//
// When Redis cannot be asked, WaitN returns the error rather than letting
// work through unthrottled or blocking without end; with FailLocal it waits
// on the in-process twin instead. A call cut short by ctx returns ctx's
// error (Redis may count a call it answers past the caller's deadline).
// In shadow mode it never waits.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error {
	if err := checkCost(l.rules, "WaitN", n); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := l.AllowN(ctx, key, n)
		if err != nil && res.Rules == nil {
			// Nothing decided: a failure mode without a twin, or a call cut
			// short by ctx (see failed). What the twin decided (Rules),
			// ctx ending just after or not, goes on below.
			return err
		}
		wait, turn := res.RetryAfter, l.leakyTurn(res)
		if res.Allowed {
			wait = res.Delay
			if wait <= 0 {
				return nil
			}
		}
		if deadline, ok := ctx.Deadline(); ok {
			switch left := time.Until(deadline); {
			case res.Allowed && left < wait:
				return fmt.Errorf("sluice: WaitN(n=%d): admitted, but its turn comes after %s, past the context deadline: %w", n, wait, context.DeadlineExceeded)
			case !res.Allowed && left < max(wait, turn):
				return fmt.Errorf("sluice: WaitN(n=%d): admission in %s, or its turn in %s, would exceed the context deadline: %w", n, wait, max(wait, turn), context.DeadlineExceeded)
			}
		}
		if err := ctxsleep.Sleep(ctx, wait); err != nil {
			if res.Allowed {
				return fmt.Errorf("sluice: WaitN(n=%d): admitted and counted, but ctx ended before its turn: %w", n, err)
			}
			return err
		}
		if res.Allowed {
			return nil
		}
	}
}

// leakyTurn returns how long a request denied with res would wait at least
// for its turn once admitted, by its policy's LeakyBucket rules: the
// queue ahead of it drains first, and nothing but a Reset shortens it. 0
// without a LeakyBucket rule. res.Rules are in the order of l.rules.
func (l *Limiter) leakyTurn(res Result) time.Duration {
	var turn time.Duration
	for i := range l.rules {
		if l.rules[i].Algorithm == LeakyBucket && i < len(res.Rules) {
			turn = max(turn, res.Rules[i].ResetAfter)
		}
	}
	return turn
}
