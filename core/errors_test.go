package core

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Every mistake New and NewPolicy reject wraps the sentinel of its kind,
// ErrInvalidLimit for a limit and ErrInvalidConfig for everything else,
// never the other, and its message names the problem.
func TestConfigurationErrors(t *testing.T) {
	_, client := newClock(t)
	var nilClient *redis.Client
	s := time.Second
	ok := Rule{Name: "ok", Algorithm: TokenBucket, Limit: PerSecond(1)}
	one := func(r Rule) []Rule { return []Rule{r} }
	cases := []struct {
		name   string
		client redis.UniversalClient // nil: client
		rules  []Rule
		opts   []Option
		want   error
		msg    string
	}{
		// Limits.
		{"zero rate", nil, one(Rule{Name: "a", Algorithm: GCRA, Limit: Limit{Period: s}}), nil, ErrInvalidLimit, `rule "a": rate 0 must be positive`},
		{"negative rate", nil, one(Rule{Name: "a", Algorithm: GCRA, Limit: Limit{Rate: -1, Period: s}}), nil, ErrInvalidLimit, "rate -1 must be positive"},
		{"zero period", nil, one(Rule{Name: "a", Algorithm: GCRA, Limit: Limit{Rate: 1}}), nil, ErrInvalidLimit, "period 0s must be positive"},
		{"negative period", nil, one(Rule{Name: "a", Algorithm: GCRA, Limit: Limit{Rate: 1, Period: -s}}), nil, ErrInvalidLimit, "period -1s must be positive"},
		{"period below 1ms", nil, one(Rule{Name: "a", Algorithm: GCRA, Limit: Limit{Rate: 1, Period: 999 * time.Microsecond}}), nil, ErrInvalidLimit, "shorter than 1ms"},
		{"fractional microseconds", nil, one(Rule{Name: "a", Algorithm: GCRA, Limit: Limit{Rate: 1, Period: s + 1}}), nil, ErrInvalidLimit, "whole number of microseconds"},
		{"negative burst", nil, one(Rule{Name: "a", Algorithm: GCRA, Limit: Limit{Rate: 1, Period: s, Burst: -1}}), nil, ErrInvalidLimit, "burst -1 must not be negative"},
		{"burst on a window", nil, one(Rule{Name: "a", Algorithm: FixedWindow, Limit: Limit{Rate: 1, Period: s, Burst: 2}}), nil, ErrInvalidLimit, "burst 2 must be 0 or equal to rate 1"},
		{"burst on a log", nil, one(Rule{Name: "a", Algorithm: SlidingWindowLog, Limit: Limit{Rate: 3, Period: s, Burst: 1}}), nil, ErrInvalidLimit, "must be 0 or equal to rate"},
		{"burst on a counter", nil, one(Rule{Name: "a", Algorithm: SlidingWindowCounter, Limit: Limit{Rate: 3, Period: s, Burst: 9}}), nil, ErrInvalidLimit, "must be 0 or equal to rate"},
		{"too large to be exact", nil, one(Rule{Name: "a", Algorithm: GCRA, Limit: Limit{Rate: 1<<40 + 1, Period: 24*time.Hour + time.Microsecond}}), nil, ErrInvalidLimit, "too large"},
		{"rate beyond 2^50", nil, one(Rule{Name: "a", Algorithm: GCRA, Limit: Limit{Rate: math.MaxInt64, Period: s, Burst: 1}}), nil, ErrInvalidLimit, "too large"},
		{"refill beyond 35 years", nil, one(Rule{Name: "a", Algorithm: TokenBucket, Limit: Limit{Rate: 1, Period: 24*time.Hour + time.Millisecond, Burst: 1_000_001}}), nil, ErrInvalidLimit, "too large"},
		{"two windows beyond 35 years", nil, one(Rule{Name: "a", Algorithm: SlidingWindowCounter, Limit: Limit{Rate: 1, Period: 18 * 366 * 24 * time.Hour}}), nil, ErrInvalidLimit, "too large"},
		{"counts beyond the counter's bound", nil, one(Rule{Name: "a", Algorithm: SlidingWindowCounter, Limit: PerDay(1 << 30)}), nil, ErrInvalidLimit, "sliding_window_counter also needs rate × two periods"},
		{"bad limit of a later rule", nil, []Rule{ok, {Name: "b", Algorithm: GCRA}}, nil, ErrInvalidLimit, `rule "b": rate 0 must be positive`},

		// The rules, apart from their limits.
		{"no rules", nil, nil, nil, ErrInvalidConfig, "no rules"},
		{"empty name", nil, one(Rule{Algorithm: GCRA, Limit: PerSecond(1)}), nil, ErrInvalidConfig, "rule 0 has an empty name"},
		{"duplicate names", nil, []Rule{ok, ok}, nil, ErrInvalidConfig, `rules 0 and 1 are both named "ok"`},
		{"empty algorithm", nil, one(Rule{Name: "a", Limit: PerSecond(1)}), nil, ErrInvalidConfig, `rule 0 ("a") has no algorithm`},
		{"empty algorithm and name", nil, one(Rule{Limit: PerSecond(1)}), nil, ErrInvalidConfig, "rule 0 has no algorithm"},
		{"unknown algorithm", nil, []Rule{ok, {Name: "a", Algorithm: "leaky", Limit: PerSecond(1)}}, nil, ErrInvalidConfig, `rule 1 ("a"): unknown algorithm "leaky"`},
		{"unknown algorithm and bad limit", nil, one(Rule{Name: "a", Algorithm: "leaky"}), nil, ErrInvalidConfig, `unknown algorithm "leaky"`},

		// Options and the client.
		{"nil client", nilClient, []Rule{ok}, nil, ErrInvalidConfig, "nil Redis client"},
		{"empty prefix", nil, []Rule{ok}, []Option{WithPrefix("")}, ErrInvalidConfig, "empty key prefix"},
		{"prefix with a brace", nil, []Rule{ok}, []Option{WithPrefix("a{b")}, ErrInvalidConfig, `key prefix "a{b" contains '{' or '}'`},
		{"unknown failure mode", nil, []Rule{ok}, []Option{WithFailureMode(FailureMode(7))}, ErrInvalidConfig, "unknown failure mode 7"},
		{"negative health check", nil, []Rule{ok}, []Option{WithHealthCheck(-5, 0)}, ErrInvalidConfig, "health check of -5 failures"},
		{"negative backoff", nil, []Rule{ok}, []Option{WithHealthCheck(3, -time.Second)}, ErrInvalidConfig, "backoff -1s"},
		{"negative deny cache", nil, []Rule{ok}, []Option{WithDenyCache(-1)}, ErrInvalidConfig, "deny cache of -1 keys"},
		{"negative max delay", nil, []Rule{ok}, []Option{WithMaxDelay(-3 * time.Second)}, ErrInvalidConfig, "max delay -3s must not be negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := c.client
			if cl == nil {
				cl = client
			}
			other := ErrInvalidConfig
			if c.want == ErrInvalidConfig {
				other = ErrInvalidLimit
			}
			_, err := NewPolicy(cl, c.rules, c.opts...)
			if !errors.Is(err, c.want) || errors.Is(err, other) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("got %v; want %v (not %v) naming %q", err, c.want, other, c.msg)
			}
			if c.client == nil && (c.opts == nil || c.name == "negative max delay") {
				if _, err := NewLocal(c.rules, c.opts...); !errors.Is(err, c.want) || errors.Is(err, other) {
					t.Errorf("NewLocal: got %v; want %v", err, c.want)
				}
			}
		})
	}
	// Period and rate units that are not round are fine.
	if _, err := New(client, GCRA, Limit{Rate: 7, Period: 1234567 * time.Microsecond, Burst: 3}); err != nil {
		t.Errorf("odd but valid limit: %v", err)
	}
}

// New names its one rule after the algorithm: an empty algorithm is
// reported as such, not as an empty rule name.
func TestNewWithoutAlgorithm(t *testing.T) {
	_, client := newClock(t)
	_, err := New(client, "", PerSecond(1))
	if !errors.Is(err, ErrInvalidConfig) || errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), "no algorithm") {
		t.Errorf("got %v; want ErrInvalidConfig naming the missing algorithm", err)
	}
	if _, err := New(nil, GCRA, PerSecond(1)); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "nil Redis client") {
		t.Errorf("nil client: %v", err)
	}
}

// Validation knows the algorithms by itself: changing the list Algorithms
// returns changes neither the next list nor what is valid.
func TestAlgorithmListDoesNotDriveValidation(t *testing.T) {
	_, client := newClock(t)
	algs := Algorithms()
	algs[0] = "bogus"
	_ = append(algs[:5], "bogus")
	if got := Algorithms(); got[0] != FixedWindow || got[5] != GCRA || len(got) != 6 {
		t.Errorf("Algorithms() after changing an earlier result: %v", got)
	}
	if _, err := New(client, "bogus", PerSecond(1)); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New with Algorithm(\"bogus\") after changing Algorithms(): got %v; want ErrInvalidConfig", err)
	}
	if _, err := NewLocal([]Rule{{Name: "a", Algorithm: "bogus", Limit: PerSecond(1)}}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewLocal with Algorithm(\"bogus\"): got %v; want ErrInvalidConfig", err)
	}
}
