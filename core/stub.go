package core

import (
	"context"
	"errors"
)

var errTODO = errors.New("sluice: not implemented yet")

// AllowN reports whether n events for key are admitted now.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (Result, error) {
	if err := l.checkCost("AllowN", n); err != nil {
		return Result{}, err
	}
	return Result{}, errTODO
}

// Peek reports the state of key without consuming.
func (l *Limiter) Peek(ctx context.Context, key string) (Result, error) { return Result{}, errTODO }

// Reset forgets key.
func (l *Limiter) Reset(ctx context.Context, key string) error { return errTODO }

// Wait blocks until one event is admitted.
func (l *Limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until n events are admitted.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error { return errTODO }
