package core

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Every AllowN is observed, one whose cost no rule can admit too.
func TestObserverSeesACostError(t *testing.T) {
	var events []Event
	lim := newOn(t, redistest.RefusedClient(t), GCRA, PerSecond(2), WithObserver(func(e Event) { events = append(events, e) }))
	if _, err := lim.AllowN(context.Background(), "k", 3); !errors.Is(err, ErrCostExceedsLimit) {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Outcome != OutcomeError || !errors.Is(events[0].Err, ErrCostExceedsLimit) || events[0].N != 3 {
		t.Errorf("events %+v; want one error event with ErrCostExceedsLimit", events)
	}
}
