package main

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/core"
)

// latencyBuckets, in seconds: a decision on a healthy Redis nearby takes
// well under a millisecond, and the default decision timeout is 100ms.
// (OpenTelemetry's default boundaries, 0 to 10000, suit milliseconds.)
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// Metrics exports the decisions of sluice limiters as OpenTelemetry
// metrics:
//
//	sluice.decisions          counter, {decision}; attributes limiter, rule, outcome, shadow
//	sluice.decision.duration  histogram, s;        attributes limiter, outcome
//	sluice.redis.healthy      gauge, 1 or 0;       attribute limiter
//
// outcome is allowed, denied, error or fallback (core.Outcome). shadow
// (a bool) is true for the denials of a limiter in shadow mode
// (core.WithShadow), which were served all the same. rule is the rule that
// decided; for error outcomes it may be empty. Through an OTLP-to-Prometheus
// pipeline they become sluice_decisions_total, sluice_decision_duration_seconds
// and sluice_redis_healthy, with the same labels as the Prometheus example.
//
// No attribute holds the key, raw or hashed: an attribute per client would
// make a series per client, without bound. Event.KeyHash is there for logs
// and sampling (finding hot keys), never for attributes.
type Metrics struct {
	decisions metric.Int64Counter
	duration  metric.Float64Histogram

	mu      sync.Mutex
	healthy []limiterHealth // read by the gauge's callback
}

type limiterHealth struct {
	attrs metric.ObserveOption
	up    *atomic.Bool
}

// NewMetrics creates the instruments with meter.
func NewMetrics(meter metric.Meter) (*Metrics, error) {
	m := &Metrics{}
	var err error
	m.decisions, err = meter.Int64Counter("sluice.decisions",
		metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions, by limiter, deciding rule, outcome (allowed, denied, error, fallback) and shadow mode."))
	if err != nil {
		return nil, err
	}
	m.duration, err = meter.Float64Histogram("sluice.decision.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time a rate-limit decision took, Redis round trip included."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	if err != nil {
		return nil, err
	}
	// Health changes rarely and is reported by a hook, so it is kept in an
	// atomic per limiter and read when the metrics are collected.
	_, err = meter.Int64ObservableGauge("sluice.redis.healthy",
		metric.WithUnit("1"),
		metric.WithDescription("1 while the limiter's decisions go to Redis, 0 while it takes Redis for unhealthy and decides by its failure mode."),
		metric.WithInt64Callback(m.observeHealth))
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) observeHealth(_ context.Context, o metric.Int64Observer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range m.healthy {
		var v int64
		if h.up.Load() {
			v = 1
		}
		o.Observe(v, h.attrs)
	}
	return nil
}

// decisionKey identifies the attribute set of one sluice.decisions series
// of a limiter.
type decisionKey struct {
	rule    string
	outcome core.Outcome
	shadow  bool
}

// Options returns the core options that make one limiter report to m with
// the attribute limiter="<limiter>": an observer and a health hook. Give
// every limiter its own name. Pass them to core.New or core.NewPolicy, or to
// a middleware constructor with nethttp.WithLimiterOptions (ginlimit,
// chilimit and echolimit have the same option).
func (m *Metrics) Options(limiter string) []core.Option {
	name := attribute.String("limiter", limiter)

	// Attribute sets are built once and reused: building one per decision
	// would allocate and sort on every request. The histogram's depend only
	// on the outcome; the counter's on the rule too, which is known only
	// once the limiter decides, so they are cached as they are first seen.
	var durationAttrs [core.OutcomeFallback + 1]metric.RecordOption
	for o := range durationAttrs {
		durationAttrs[o] = metric.WithAttributeSet(attribute.NewSet(name, attribute.String("outcome", core.Outcome(o).String())))
	}
	var (
		mu            sync.RWMutex
		decisionAttrs = map[decisionKey]metric.AddOption{}
	)
	counterAttrs := func(k decisionKey) metric.AddOption {
		mu.RLock()
		a, ok := decisionAttrs[k]
		mu.RUnlock()
		if ok {
			return a
		}
		a = metric.WithAttributeSet(attribute.NewSet(name,
			attribute.String("rule", k.rule),
			attribute.String("outcome", k.outcome.String()),
			attribute.Bool("shadow", k.shadow)))
		mu.Lock()
		decisionAttrs[k] = a
		mu.Unlock()
		return a
	}

	up := new(atomic.Bool)
	up.Store(true) // a new limiter sends its decisions to Redis
	m.mu.Lock()
	m.healthy = append(m.healthy, limiterHealth{attrs: metric.WithAttributeSet(attribute.NewSet(name)), up: up})
	m.mu.Unlock()

	// The observer has no request context, so the measurements carry no
	// trace exemplars.
	ctx := context.Background()
	observe := func(ev core.Event) {
		m.decisions.Add(ctx, 1, counterAttrs(decisionKey{ev.Rule, ev.Outcome, ev.Shadow}))
		if int(ev.Outcome) < len(durationAttrs) {
			m.duration.Record(ctx, ev.Latency.Seconds(), durationAttrs[ev.Outcome])
		} else {
			m.duration.Record(ctx, ev.Latency.Seconds(), metric.WithAttributes(name, attribute.String("outcome", ev.Outcome.String())))
		}
	}
	health := func(h core.Health, _ error) { up.Store(h == core.Healthy) }
	return []core.Option{core.WithObserver(observe), core.WithHealthHook(health)}
}
