// Package ctxsleep is the one sleep that a context can cut short, shared
// by core's Wait and the middleware's hold of a LeakyBucket request.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d or until ctx is done, and returns ctx's error when ctx
// ended it (at once when d <= 0 and ctx is done), nil otherwise.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
