package main

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice/examples/observability/internal/scenario"
)

func newMetrics(t *testing.T) (*sdkmetric.ManualReader, *Metrics) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { provider.Shutdown(context.Background()) })
	m, err := NewMetrics(provider.Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	return reader, m
}

type attrs map[string]any // attribute key to a string or a bool

func TestMetrics(t *testing.T) {
	reader, m := newMetrics(t)
	scenario.Run(t, m.Options)
	rm := collect(t, reader)

	// Counts are summed over the attributes a case leaves out: core may or
	// may not name a rule for an error outcome.
	for _, c := range []struct {
		metric string
		attrs  attrs
		want   float64
	}{
		{"sluice.decisions", attrs{"limiter": "redis", "rule": scenario.Rule, "outcome": "allowed", "shadow": false}, 2},
		{"sluice.decisions", attrs{"limiter": "redis", "rule": scenario.Rule, "outcome": "denied", "shadow": false}, 1},
		{"sluice.decisions", attrs{"limiter": "redis"}, 3},
		{"sluice.decisions", attrs{"limiter": "shadow", "rule": scenario.Rule, "outcome": "allowed", "shadow": false}, 1},
		{"sluice.decisions", attrs{"limiter": "shadow", "rule": scenario.Rule, "outcome": "denied", "shadow": true}, 1},
		{"sluice.decisions", attrs{"limiter": "shadow"}, 2},
		{"sluice.decisions", attrs{"limiter": "closed", "outcome": "error", "shadow": false}, 2},
		{"sluice.decisions", attrs{"limiter": "closed"}, 2},
		{"sluice.decisions", attrs{"limiter": "local", "rule": scenario.Rule, "outcome": "fallback", "shadow": false}, 1},
		{"sluice.decisions", attrs{"limiter": "local"}, 1},

		// For a histogram: the number of recordings.
		{"sluice.decision.duration", attrs{"limiter": "redis", "outcome": "allowed"}, 2},
		{"sluice.decision.duration", attrs{"limiter": "redis", "outcome": "denied"}, 1},
		{"sluice.decision.duration", attrs{"limiter": "shadow", "outcome": "denied"}, 1},
		{"sluice.decision.duration", attrs{"limiter": "closed", "outcome": "error"}, 2},
		{"sluice.decision.duration", attrs{"limiter": "local", "outcome": "fallback"}, 1},
		{"sluice.decision.duration", nil, 8},

		{"sluice.redis.healthy", attrs{"limiter": "redis"}, 1},
		{"sluice.redis.healthy", attrs{"limiter": "shadow"}, 1},
		{"sluice.redis.healthy", attrs{"limiter": "closed"}, 0},
		{"sluice.redis.healthy", attrs{"limiter": "local"}, 1},
	} {
		if got := sum(t, rm, c.metric, c.attrs); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.metric, c.attrs, got, c.want)
		}
	}

	units := map[string]string{"sluice.decisions": "{decision}", "sluice.decision.duration": "s", "sluice.redis.healthy": "1"}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if want, ok := units[md.Name]; !ok {
				t.Errorf("unexpected metric %s", md.Name)
			} else if md.Unit != want {
				t.Errorf("%s has unit %q, want %q", md.Name, md.Unit, want)
			}
			if s, ok := md.Data.(metricdata.Sum[int64]); ok && (!s.IsMonotonic || s.Temporality != metricdata.CumulativeTemporality) {
				t.Errorf("%s: monotonic %v, temporality %v; want a cumulative counter", md.Name, s.IsMonotonic, s.Temporality)
			}
		}
	}
}

// TestNoKeyAttribute checks that no attribute of any data point holds a key
// of the scenario, raw or hashed: only limiter, rule, outcome and shadow.
func TestNoKeyAttribute(t *testing.T) {
	reader, m := newMetrics(t)
	scenario.Run(t, m.Options)
	allowed := map[attribute.Key]bool{"limiter": true, "rule": true, "outcome": true, "shadow": true}
	for _, set := range attributeSets(collect(t, reader)) {
		for _, kv := range set.ToSlice() {
			if !allowed[kv.Key] {
				t.Errorf("attribute %s=%s", kv.Key, kv.Value.Emit())
			}
		}
	}
}

func TestHealthRecovers(t *testing.T) {
	reader, m := newMetrics(t)
	healthy := func() bool {
		return sum(t, collect(t, reader), "sluice.redis.healthy", attrs{"limiter": "recovering"}) == 1
	}
	scenario.Recover(t, m.Options, healthy)
	if got := sum(t, collect(t, reader), "sluice.decisions", attrs{"limiter": "recovering", "outcome": "error"}); got != 1 {
		t.Errorf("error decisions = %v, want 1", got)
	}
}

func collect(t *testing.T, reader *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// sum adds up the data points of metric whose attributes include want:
// counter and gauge values, histogram counts.
func sum(t *testing.T, rm metricdata.ResourceMetrics, metric string, want attrs) float64 {
	t.Helper()
	total := 0.0
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if md.Name != metric {
				continue
			}
			switch data := md.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					if matches(p.Attributes, want) {
						total += float64(p.Value)
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range data.DataPoints {
					if matches(p.Attributes, want) {
						total += float64(p.Value)
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range data.DataPoints {
					if matches(p.Attributes, want) {
						total += float64(p.Count)
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", metric, md.Data)
			}
		}
	}
	return total
}

func matches(set attribute.Set, want attrs) bool {
	for k, v := range want {
		got, ok := set.Value(attribute.Key(k))
		if !ok {
			return false
		}
		switch v := v.(type) {
		case string:
			if got.Type() != attribute.STRING || got.AsString() != v {
				return false
			}
		case bool:
			if got.Type() != attribute.BOOL || got.AsBool() != v {
				return false
			}
		default:
			panic("attrs: a string or a bool")
		}
	}
	return true
}

func attributeSets(rm metricdata.ResourceMetrics) []attribute.Set {
	var sets []attribute.Set
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			switch data := md.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Gauge[int64]:
				for _, p := range data.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range data.DataPoints {
					sets = append(sets, p.Attributes)
				}
			}
		}
	}
	return sets
}
