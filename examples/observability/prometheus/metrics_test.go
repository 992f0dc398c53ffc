package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/examples/observability/internal/scenario"
)

func newMetrics(t *testing.T) (*prometheus.Registry, *Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

func TestMetrics(t *testing.T) {
	reg, m := newMetrics(t)
	scenario.Run(t, m.Options)

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	// Counts are summed over the labels a case leaves out: core may or may
	// not name a rule for an error outcome.
	for _, c := range []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"sluice_decisions_total", map[string]string{"limiter": "redis", "rule": scenario.Rule, "outcome": "allowed", "shadow": "false"}, 2},
		{"sluice_decisions_total", map[string]string{"limiter": "redis", "rule": scenario.Rule, "outcome": "denied", "shadow": "false"}, 1},
		{"sluice_decisions_total", map[string]string{"limiter": "redis"}, 3},
		{"sluice_decisions_total", map[string]string{"limiter": "shadow", "rule": scenario.Rule, "outcome": "allowed", "shadow": "false"}, 1},
		{"sluice_decisions_total", map[string]string{"limiter": "shadow", "rule": scenario.Rule, "outcome": "denied", "shadow": "true"}, 1},
		{"sluice_decisions_total", map[string]string{"limiter": "shadow"}, 2},
		{"sluice_decisions_total", map[string]string{"limiter": "closed", "outcome": "error", "shadow": "false"}, 2},
		{"sluice_decisions_total", map[string]string{"limiter": "closed"}, 2},
		{"sluice_decisions_total", map[string]string{"limiter": "local", "rule": scenario.Rule, "outcome": "fallback", "shadow": "false"}, 1},
		{"sluice_decisions_total", map[string]string{"limiter": "local"}, 1},

		// For a histogram: the number of observations.
		{"sluice_decision_seconds", map[string]string{"limiter": "redis", "outcome": "allowed"}, 2},
		{"sluice_decision_seconds", map[string]string{"limiter": "redis", "outcome": "denied"}, 1},
		{"sluice_decision_seconds", map[string]string{"limiter": "shadow", "outcome": "denied"}, 1},
		{"sluice_decision_seconds", map[string]string{"limiter": "closed", "outcome": "error"}, 2},
		{"sluice_decision_seconds", map[string]string{"limiter": "local", "outcome": "fallback"}, 1},
		{"sluice_decision_seconds", nil, 8},

		{"sluice_redis_healthy", map[string]string{"limiter": "redis"}, 1},
		{"sluice_redis_healthy", map[string]string{"limiter": "shadow"}, 1},
		{"sluice_redis_healthy", map[string]string{"limiter": "closed"}, 0},
		{"sluice_redis_healthy", map[string]string{"limiter": "local"}, 1},
	} {
		if got := sum(t, reg, c.metric, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.metric, c.labels, got, c.want)
		}
	}
}

// TestNoKeyLabel checks that no label of any series holds a key of the
// scenario, raw or hashed: only limiter, rule, outcome and shadow.
func TestNoKeyLabel(t *testing.T) {
	reg, m := newMetrics(t)
	scenario.Run(t, m.Options)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"limiter": true, "rule": true, "outcome": true, "shadow": true}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if !allowed[l.GetName()] {
					t.Errorf("%s has a label %s=%q", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

func TestHealthRecovers(t *testing.T) {
	reg, m := newMetrics(t)
	healthy := func() bool {
		return sum(t, reg, "sluice_redis_healthy", map[string]string{"limiter": "recovering"}) == 1
	}
	scenario.Recover(t, m.Options, healthy)
	if got := sum(t, reg, "sluice_decisions_total", map[string]string{"limiter": "recovering", "outcome": "error"}); got != 1 {
		t.Errorf("error decisions = %v, want 1", got)
	}
}

func TestRegisterTwice(t *testing.T) {
	reg, _ := newMetrics(t)
	if _, err := NewMetrics(reg); err == nil {
		t.Error("NewMetrics on a registry that has the metrics already: no error")
	}
}

// sum gathers reg and adds up the series of metric whose labels include
// labels: counter and gauge values, histogram observation counts.
func sum(t *testing.T, reg prometheus.Gatherer, metric string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case s.Counter != nil:
				total += s.Counter.GetValue()
			case s.Gauge != nil:
				total += s.Gauge.GetValue()
			case s.Histogram != nil:
				total += float64(s.Histogram.GetSampleCount())
			}
		}
	}
	return total
}
