package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/core"
)

// latencyBuckets, in seconds: a decision on a healthy Redis nearby takes
// well under a millisecond, and the default decision timeout is 100ms.
// (Prometheus's default buckets start at 5ms and would put every decision
// in the first one.)
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// Metrics exports the decisions of sluice limiters to Prometheus:
//
//	sluice_decisions_total{limiter, rule, outcome, shadow}  counter
//	sluice_decision_seconds{limiter, outcome}               histogram
//	sluice_redis_healthy{limiter}                           gauge, 1 or 0
//
// outcome is allowed, denied, error or fallback (core.Outcome). shadow is
// "true" for the denials of a limiter in shadow mode (core.WithShadow),
// which were served all the same, and "false" otherwise, so that
// sluice_decisions_total{outcome="denied",shadow="false"} counts Redis's
// 429s (the README says which others it leaves out).
// rule is the rule that decided; for error outcomes it may be empty.
//
// No label holds the key, raw or hashed: a label per client would make a
// series per client, without bound. Event.KeyHash is there for logs and
// sampling (finding hot keys), never for labels.
type Metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	healthy   *prometheus.GaugeVec
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Rate-limit decisions, by limiter, deciding rule, outcome (allowed, denied, error, fallback) and shadow mode.",
		}, []string{"limiter", "rule", "outcome", "shadow"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_decision_seconds",
			Help:    "Time a rate-limit decision took, Redis round trip included.",
			Buckets: latencyBuckets,
		}, []string{"limiter", "outcome"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_redis_healthy",
			Help: "1 while the limiter's decisions go to Redis, 0 while it takes Redis for unhealthy and decides by its failure mode.",
		}, []string{"limiter"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.latency, m.healthy} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Options returns the core options that make one limiter report to m under
// the label limiter="<limiter>": an observer and a health hook. Give every
// limiter its own name. Pass them to core.New or core.NewPolicy, or to a
// middleware constructor with nethttp.WithLimiterOptions (ginlimit,
// chilimit and echolimit have the same option).
func (m *Metrics) Options(limiter string) []core.Option {
	// The series that do not depend on the rule are looked up once here,
	// not on every decision. That also exports them, at zero, from the
	// start, so a rate() over the first error or fallback sees it.
	var latency [core.OutcomeFallback + 1]prometheus.Observer
	for o := range latency {
		latency[o] = m.latency.WithLabelValues(limiter, core.Outcome(o).String())
	}
	healthy := m.healthy.WithLabelValues(limiter)
	healthy.Set(1) // a new limiter sends its decisions to Redis

	observe := func(ev core.Event) {
		shadow := "false"
		if ev.Shadow {
			shadow = "true"
		}
		m.decisions.WithLabelValues(limiter, ev.Rule, ev.Outcome.String(), shadow).Inc()
		if int(ev.Outcome) < len(latency) {
			latency[ev.Outcome].Observe(ev.Latency.Seconds())
		} else {
			m.latency.WithLabelValues(limiter, ev.Outcome.String()).Observe(ev.Latency.Seconds())
		}
	}
	health := func(h core.Health, _ error) {
		if h == core.Healthy {
			healthy.Set(1)
		} else {
			healthy.Set(0)
		}
	}
	return []core.Option{core.WithObserver(observe), core.WithHealthHook(health)}
}
