package ctxsleep

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("sleep with a done context = %v", err)
	}
	if err := Sleep(context.Background(), time.Microsecond); err != nil {
		t.Errorf("sleep = %v", err)
	}
}
