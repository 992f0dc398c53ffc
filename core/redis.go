package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// maxRawKey is the longest user key stored as is; longer keys are hashed.
const maxRawKey = 64

// storedKey returns how a user key appears inside Redis keys: as is when it
// is short, non-empty, does not start with '#' and holds no '}'; otherwise
// '#' and the hex SHA-256 of the key (128 bits). No raw key starts with '#',
// so a raw key never equals a hashed one, and different user keys never
// share state. No stored key holds '}', so the hash tag "{<stored key>}" is
// always the whole stored key, never cut short or empty.
func storedKey(key string) string {
	if len(key) > 0 && len(key) <= maxRawKey && key[0] != '#' && strings.IndexByte(key, '}') < 0 {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "#" + hex.EncodeToString(sum[:16])
}

// keys returns the Redis keys of key, one per rule:
// "<prefix>:{<stored key>}:<fingerprint>:<rule index>". The braces make the
// stored key the hash tag, so all of them share one Redis Cluster slot.
func (l *Limiter) keys(key string) []string {
	base := l.prefix + ":{" + storedKey(key) + "}:" + l.fp + ":"
	keys := make([]string, len(l.rules))
	for i := range l.rules {
		keys[i] = base + strconv.Itoa(i)
	}
	return keys
}

// args returns the script's ARGV for mode ("1" consume, "0" peek) and n.
func (l *Limiter) args(mode string, n int) []interface{} {
	args := make([]interface{}, 0, 2+argsPerRule*len(l.rules))
	args = append(args, mode, strconv.Itoa(n))
	for i := range l.rules {
		args = append(args, l.rules[i].args...)
	}
	return args
}

func (l *Limiter) run(ctx context.Context, key, mode string, n int) (Result, error) {
	c := &call{keys: l.keys(key), args: l.args(mode, n)}
	if err := l.batch.do(ctx, c); err != nil {
		return Result{}, err
	}
	v := c.res
	if len(v) != 1+5*len(l.rules) {
		return Result{}, fmt.Errorf("sluice: unexpected script reply of %d values", len(v))
	}
	return l.result(v), nil
}

// result turns a script reply (see lua/policy.lua) into a Result. The Go
// twin produces the same reply, so both share this.
func (l *Limiter) result(v []int64) Result {
	return buildResult(l.rules, v)
}

func buildResult(rules []compiledRule, v []int64) Result {
	res := Result{Allowed: v[0] == 1, Rules: make([]RuleResult, len(rules))}
	decider := -1
	for i := range rules {
		w := v[1+5*i:]
		rr := RuleResult{
			Name:       rules[i].Name,
			Limit:      rules[i].Limit,
			Allowed:    w[0] == 1,
			Remaining:  int(w[1]),
			RetryAfter: time.Duration(w[2]) * time.Microsecond,
			ResetAfter: time.Duration(w[3]) * time.Microsecond,
			Delay:      time.Duration(w[4]) * time.Microsecond,
		}
		res.Rules[i] = rr
		if rr.ResetAfter > res.ResetAfter {
			res.ResetAfter = rr.ResetAfter
		}
		if rr.Delay > res.Delay {
			res.Delay = rr.Delay
		}
		if i == 0 || rr.Remaining < res.Remaining {
			res.Remaining = rr.Remaining
		}
		// The deciding rule: when denied, the longest RetryAfter; when
		// allowed, the least Remaining. Ties go to the earlier rule.
		switch {
		case decider < 0:
			decider = i
		case !res.Allowed && rr.RetryAfter > res.Rules[decider].RetryAfter:
			decider = i
		case res.Allowed && rr.Remaining < res.Rules[decider].Remaining:
			decider = i
		}
	}
	d := res.Rules[decider]
	res.Limit, res.Rule = d.Limit, d.Name
	if !res.Allowed {
		res.RetryAfter = d.RetryAfter
	}
	return res
}
