package flow

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
)

// The header names. http.Header canonicalises them (RateLimit-Policy goes
// out as Ratelimit-Policy over HTTP/1.1); field names are case-insensitive.
const (
	headerPolicy     = "RateLimit-Policy"
	headerRateLimit  = "RateLimit"
	headerLimit      = "X-RateLimit-Limit"
	headerRemaining  = "X-RateLimit-Remaining"
	headerReset      = "X-RateLimit-Reset"
	headerRetryAfter = "Retry-After"
)

// The canonical forms of the draft's names, computed once: writing them
// into the header map directly spares canonicalising them, an allocation
// each, on every response.
var (
	keyPolicy    = http.CanonicalHeaderKey(headerPolicy)
	keyRateLimit = http.CanonicalHeaderKey(headerRateLimit)
)

// setHeaders writes the rate-limit headers of res in mode m. policy is the
// RateLimit-Policy value of the limiter that decided ("" to format it from
// res). now is used only for the epoch seconds of X-RateLimit-Reset.
//
// The draft headers cost two allocations: the RateLimit value and one
// backing array for both values.
func setHeaders(h http.Header, m HeaderMode, res core.Result, policy string, now time.Time) {
	if m == HeadersDraft || m == HeadersBoth {
		rules := ruleResults(res)
		if policy == "" {
			policy = Policy(rules)
		}
		vals := []string{policy, RateLimit(rules)}
		h[keyPolicy] = vals[0:1:1]
		h[keyRateLimit] = vals[1:2:2]
	}
	if m == HeadersLegacy || m == HeadersBoth {
		reset := res.ResetAfter
		for _, rr := range res.Rules {
			if rr.Name == res.Rule {
				reset = rr.ResetAfter
				break
			}
		}
		h.Set(headerLimit, itoa(int64(res.Limit.Rate)))
		h.Set(headerRemaining, itoa(int64(max(res.Remaining, 0))))
		h.Set(headerReset, itoa(ceilUnix(now.Add(reset))))
	}
}

// ruleResults returns the rules of res, or one made of its summary when a
// limiter reported none.
func ruleResults(res core.Result) []core.RuleResult {
	if len(res.Rules) > 0 {
		return res.Rules
	}
	return []core.RuleResult{{
		Name: res.Rule, Limit: res.Limit, Allowed: res.Allowed, Remaining: res.Remaining,
		RetryAfter: res.RetryAfter, ResetAfter: res.ResetAfter, Delay: res.Delay,
	}}
}

// Policy formats the RateLimit-Policy field: one item per rule,
// `"name";q=<Rate>;w=<Period in whole seconds>`. The draft has no burst
// parameter, so q is the Rate even when Burst differs; w is rounded up and
// at least 1, so a sub-second period shows as w=1.
func Policy(rules []core.RuleResult) string {
	b := make([]byte, 0, 32*len(rules))
	for i, rr := range rules {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendName(b, rr.Name)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, int64(rr.Limit.Rate), 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, max(ceilSeconds(rr.Limit.Period), 1), 10)
	}
	return string(b)
}

// RateLimit formats the RateLimit field: one item per rule,
// `"name";r=<Remaining>;t=<seconds>`, where t is the rule's RetryAfter when
// it denies and its ResetAfter otherwise, in whole seconds rounded up.
func RateLimit(rules []core.RuleResult) string {
	b := make([]byte, 0, 32*len(rules))
	for i, rr := range rules {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendName(b, rr.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, int64(max(rr.Remaining, 0)), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, resetSeconds(rr), 10)
	}
	return string(b)
}

// resetSeconds is the t parameter of one rule.
func resetSeconds(rr core.RuleResult) int64 {
	if !rr.Allowed {
		return ceilSeconds(rr.RetryAfter)
	}
	return ceilSeconds(rr.ResetAfter)
}

// RetryAfterSeconds is the Retry-After of a denial: RetryAfter in whole
// seconds, rounded up, at least 1, and never earlier than the t of any rule
// that denies.
func RetryAfterSeconds(res core.Result) int64 {
	s := max(ceilSeconds(res.RetryAfter), 1)
	for _, rr := range res.Rules {
		if !rr.Allowed {
			s = max(s, ceilSeconds(rr.RetryAfter))
		}
	}
	return s
}

// appendName appends name as a structured-field String (RFC 8941): quoted,
// with '"' and '\' escaped; bytes a String cannot hold become '_'.
func appendName(b []byte, name string) []byte {
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		switch ch := name[i]; {
		case ch == '"' || ch == '\\':
			b = append(b, '\\', ch)
		case ch < 0x20 || ch > 0x7e:
			b = append(b, '_')
		default:
			b = append(b, ch)
		}
	}
	return append(b, '"')
}

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// ceilUnix returns t in Unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
