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
	return keyStrings(l.appendKeys(nil, storedKey(key)))
}

// appendKeys appends the Redis keys of a stored key to dst, built in the
// buffers of dst's spare capacity: with a pooled call's keys, nothing is
// allocated once the buffers have grown to fit.
func (l *Limiter) appendKeys(dst []keyArg, stored string) []keyArg {
	for i := range l.rules {
		if len(dst) < cap(dst) {
			dst = dst[:len(dst)+1]
		} else {
			dst = append(dst, keyArg{})
		}
		k := &dst[len(dst)-1]
		k.b = append(append(append(append(k.b[:0], l.prefix...), ":{"...), stored...), l.suffixes[i]...)
	}
	return dst
}

// keyArg is one Redis key of a call, handed to go-redis by pointer as an
// encoding.BinaryMarshaler. A pointer goes into an interface as it is,
// where a string would be copied to the heap first; with the key's bytes
// in a buffer the pooled call keeps, a decision's keys allocate nothing.
type keyArg struct{ b []byte }

// MarshalBinary returns the key for go-redis to write. The bytes are the
// call's own: go-redis writes them before the call is answered and reused.
func (k *keyArg) MarshalBinary() ([]byte, error) { return k.b, nil }

// String returns the key: go-redis reads a cluster command's first key as
// a string to find its slot, and hooks print commands with it.
func (k *keyArg) String() string { return string(k.b) }

// keyStrings returns keys as strings (for a DEL, rare enough to copy).
func keyStrings(keys []keyArg) []string {
	ks := make([]string, len(keys))
	for i := range keys {
		ks[i] = string(keys[i].b)
	}
	return ks
}

// costArgs holds small costs already boxed as script arguments, so the hot
// path does not allocate to pass n.
var costArgs = func() (a [65]interface{}) {
	for i := range a {
		a[i] = strconv.Itoa(i)
	}
	return a
}()

// peekArg is Peek's script argument, boxed once.
var peekArg interface{} = "-1"

// appendArgs appends a request's own script argument to dst: its cost n to
// consume it (AllowN), or -n to only look (Peek).
func appendArgs(dst []interface{}, consume bool, n int) []interface{} {
	if !consume {
		if n == 1 {
			return append(dst, peekArg)
		}
		return append(dst, strconv.Itoa(-n))
	}
	if n < len(costArgs) {
		return append(dst, costArgs[n])
	}
	return append(dst, strconv.Itoa(n))
}

// ruleArgs returns the script arguments every request of the limiter
// shares: the number of rules, then each rule's parameters.
func ruleArgs(rules []compiledRule) []interface{} {
	args := []interface{}{strconv.Itoa(len(rules))}
	for i := range rules {
		args = append(args, rules[i].args...)
	}
	return args
}

// args returns the whole ARGV of one request alone.
func (l *Limiter) args(consume bool, n int) []interface{} {
	return appendArgs(append([]interface{}(nil), l.batch.ruleArgs...), consume, n)
}

// run decides key by the script, in the limiter's batcher, within the
// limiter's timeout.
func (l *Limiter) run(ctx context.Context, key string, consume bool, n int) (Result, error) {
	c := getCall(callScript)
	stored := storedKey(key)
	c.keys = l.appendKeys(c.keys, stored)
	c.args = appendArgs(c.args, consume, n)
	c.unit = consume && n == 1
	if l.batch.grouping == groupSlot {
		c.slot = clusterSlot(stored)
	}
	answered, err := l.batch.do(ctx, l.opts.timeout, c)
	if !answered {
		return Result{}, err // c may still be in a pipeline: not reused
	}
	defer putCall(c) // after the Result is built: c.res is reused
	if err != nil {
		return Result{}, err
	}
	if len(c.res) != 1+5*len(l.rules) {
		return Result{}, fmt.Errorf("sluice: unexpected script reply of %d values", len(c.res))
	}
	return buildResult(l.rules, c.res), nil
}

// buildResult turns a script reply (see lua/policy.lua) into a Result. The
// Go twin produces the same reply, so both share it.
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

// clusterSlot is the Redis Cluster slot of keys whose hash tag is tag:
// CRC16 (XMODEM) modulo 16384, as Redis computes it.
func clusterSlot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for j := 0; j < 8; j++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) & 16383
}
