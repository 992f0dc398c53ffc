package flow

import (
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
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
	keyLimit     = http.CanonicalHeaderKey(headerLimit)
	keyRemaining = http.CanonicalHeaderKey(headerRemaining)
	keyReset     = http.CanonicalHeaderKey(headerReset)
)

// setHeaders writes the rate-limit headers of res in mode m. policy is the
// RateLimit-Policy value of res's rules ("" to format it from res). now is
// used only for the epoch seconds of X-RateLimit-Reset.
//
// When a middleware before this one (a global limit around a route's) has
// set the draft fields already, the items of res are added to them (see
// addItems); the legacy fields are replaced only by a rule with no more
// remaining than the one they describe: they stay the most restrictive.
//
// The draft headers of a lone middleware cost two allocations: the
// RateLimit value and one backing array for both values; the legacy ones
// two more: one string for their three numbers and one array.
//
// When a middleware before this one has set the draft fields, it returns
// res's rules as those fields name them (a copy, see addItems), and nil
// otherwise, so that a denial can name them the same way (see
// renameRules).
func setHeaders(h http.Header, m HeaderMode, res core.Result, policy string, now time.Time) (renamed []core.RuleResult) {
	if m == HeadersDraft || m == HeadersBoth {
		rules := ruleResults(res)
		if prevPolicy, prevState := h[keyPolicy], h[keyRateLimit]; len(prevPolicy) > 0 || len(prevState) > 0 {
			renamed = addItems(h, rules, prevPolicy, prevState)
		} else {
			if policy == "" {
				policy = Policy(rules)
			}
			vals := []string{policy, RateLimit(rules)}
			h[keyPolicy] = vals[0:1:1]
			h[keyRateLimit] = vals[1:2:2]
		}
	}
	if m == HeadersLegacy || m == HeadersBoth {
		setLegacy(h, res, now)
	}
	return renamed
}

// setLegacy writes X-RateLimit-Limit, -Remaining and -Reset of res's
// deciding rule, wholly: the one with the fewest remaining, or when denied
// the longest wait, which Retry-After is. (Of a denial of a cost above 1,
// another rule may have fewer left.) Fields set by a middleware before
// this one stay when their rule has fewer remaining and res admits: a
// denial's are the ones its client must wait for.
func setLegacy(h http.Header, res core.Result, now time.Time) {
	quota, left, reset := res.Limit, res.Remaining, res.ResetAfter
	for _, rr := range res.Rules {
		if rr.Name == res.Rule {
			quota, left, reset = rr.Limit, rr.Remaining, rr.ResetAfter
			break
		}
	}
	limit, _ := Quota(quota)
	remaining := min(int64(max(left, 0)), limit)
	if v := h[keyRemaining]; len(v) > 0 && res.Allowed {
		if prev, err := strconv.ParseInt(v[0], 10, 64); err == nil && prev < remaining {
			return // an outer middleware's rule is more restrictive
		}
	}
	// One string holds the three numbers, each value a substring of it.
	var buf [3 * 20]byte
	b := strconv.AppendInt(buf[:0], limit, 10)
	i := len(b)
	b = strconv.AppendInt(b, remaining, 10)
	j := len(b)
	b = strconv.AppendInt(b, ceilUnix(now.Add(reset)), 10)
	all := string(b)
	vals := []string{all[:i], all[i:j], all[j:]}
	h[keyLimit], h[keyRemaining], h[keyReset] = vals[0:1:1], vals[1:2:2], vals[2:3:3]
}

// addItems adds the items of rules to the RateLimit-Policy and RateLimit
// fields already set (prevPolicy, prevState), each field one list. A rule
// whose name is taken there goes by "<name>-2" (or -3, and so on: the
// first free), in both fields, so that a client can pair them. It returns
// the rules as named in the fields.
func addItems(h http.Header, rules []core.RuleResult, prevPolicy, prevState []string) []core.RuleResult {
	taken := map[string]bool{}
	for _, field := range [2][]string{prevPolicy, prevState} {
		for _, v := range field {
			itemNames(v, func(name string) { taken[name] = true })
		}
	}
	renamed := make([]core.RuleResult, len(rules))
	for i, rr := range rules {
		name := rr.Name
		quoted := string(appendName(nil, name))
		for n := 2; taken[quoted]; n++ {
			name = rr.Name + "-" + strconv.Itoa(n)
			quoted = string(appendName(nil, name))
		}
		taken[quoted] = true
		rr.Name = name
		renamed[i] = rr
	}
	h[keyPolicy] = []string{joinList(prevPolicy, Policy(renamed))}
	h[keyRateLimit] = []string{joinList(prevState, RateLimit(renamed))}
	return renamed
}

// joinList joins the field values prev and v into one list.
func joinList(prev []string, v string) string {
	var b strings.Builder
	for _, p := range prev {
		if p = strings.TrimSpace(p); p != "" {
			b.WriteString(p)
			b.WriteString(", ")
		}
	}
	b.WriteString(v)
	return b.String()
}

// itemNames calls f with the name of each item of the structured-field
// list v whose name is a String, quotes and escapes included (as
// appendName writes it).
func itemNames(v string, f func(string)) {
	start := true // at the start of an item
	for i := 0; i < len(v); i++ {
		switch ch := v[i]; {
		case ch == '"':
			j := i + 1
			for j < len(v) && v[j] != '"' {
				if v[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j, len(v)-1)
			if start {
				f(v[i : j+1])
			}
			i, start = j, false
		case ch == ',':
			start = true
		case ch != ' ' && ch != '\t':
			start = false
		}
	}
}

// retryAfter returns the Retry-After of a denial whose own is s seconds:
// the larger of s and the one already set on h (by a middleware before
// this one).
func retryAfter(h http.Header, s int64) string {
	if v := h.Get(headerRetryAfter); v != "" {
		if prev, err := strconv.ParseInt(v, 10, 64); err == nil && prev > s {
			s = prev
		}
	}
	return itoa(s)
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

// formatBuffer is the size of the buffer on the stack in which Policy and
// RateLimit format a value, so that a value up to that long costs one
// allocation, the string: a few rules with long names and the largest
// numbers. (A longer value grows the buffer on the heap.)
const formatBuffer = 256

// Policy formats the RateLimit-Policy field: one item per rule,
// `"name";q=<quota>;w=<window in whole seconds>` (see Quota).
func Policy(rules []core.RuleResult) string {
	var buf [formatBuffer]byte
	b := buf[:0]
	for i, rr := range rules {
		if i > 0 {
			b = append(b, ", "...)
		}
		q, w := Quota(rr.Limit)
		b = appendName(b, rr.Name)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, q, 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, w, 10)
	}
	return string(b)
}

// Quota returns the q and w that RateLimit-Policy advertises for limit:
// Rate events per Period in general, and, for a bucket whose Burst is
// larger than its Rate, Burst events over the time the bucket takes to
// refill them (Burst/Rate × Period): the most a client can send at once,
// which is what RateLimit's r counts down from. (A Burst below the Rate
// keeps q=Rate: the bucket admits Rate per Period, and r never exceeds
// Burst.) (The draft has no burst parameter.) w is
// in whole seconds, rounded up and at least 1, so a limit of 5 per 500ms
// reads q=5;w=1.
func Quota(limit core.Limit) (q, w int64) {
	q, period := int64(limit.Rate), limit.Period
	if b := int64(limit.Burst); b > q && q > 0 {
		// period × b / q without overflow: b and a Period fit in 63 bits.
		hi, lo := bits.Mul64(uint64(period), uint64(b))
		if hi >= uint64(q) {
			period = math.MaxInt64
		} else {
			quo, rem := bits.Div64(hi, lo, uint64(q))
			if rem > 0 {
				quo++
			}
			period = time.Duration(min(quo, math.MaxInt64))
		}
		q = b
	}
	return max(q, 0), max(ceilSeconds(period), 1)
}

// RateLimit formats the RateLimit field: one item per rule,
// `"name";r=<Remaining>;t=<seconds>`, where t is the rule's RetryAfter when
// it denies and its ResetAfter otherwise, in whole seconds rounded up. r
// never exceeds the rule's q in RateLimit-Policy (see Quota).
func RateLimit(rules []core.RuleResult) string {
	var buf [formatBuffer]byte
	b := buf[:0]
	for i, rr := range rules {
		if i > 0 {
			b = append(b, ", "...)
		}
		q, _ := Quota(rr.Limit)
		b = appendName(b, rr.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, min(int64(max(rr.Remaining, 0)), q), 10)
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
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++ // (not d + time.Second - 1, which wraps past the longest Duration)
	}
	return s
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

// renameRules returns res with its rules named as renamed, setHeaders's
// copy of them (of the one rule made of res's summary when res has none),
// the deciding rule's name included.
func renameRules(res core.Result, renamed []core.RuleResult) core.Result {
	if len(res.Rules) == 0 {
		res.Rule = renamed[0].Name
		return res
	}
	for i, rr := range res.Rules {
		if rr.Name == res.Rule {
			res.Rule = renamed[i].Name
			break
		}
	}
	res.Rules = renamed
	return res
}
