package core

import (
	"fmt"
	"strconv"
)

// appendScriptCall appends to dst the whole command that decides calls in
// one script call of s: EVALSHA and the hash (EVAL and the source when source),
// the number of keys, every call's keys (by pointer: see keyArg), the
// arguments every decision shares, then each call's own argument unless
// all consume 1 (see allUnit).
//
// With cross, the calls lie in several slots of one Redis Cluster master:
// the command is the node form of s, declaring no keys, with every call's
// keys at the head of ARGV after their number (see lua/policy.lua). Its
// first key, at crossKeyPos, routes it (see scriptGroup.build), but Redis
// checks none before running it: a declared key absent from a slot being
// migrated away would have the whole call redirected (ASK) to the
// importing master, where, under ASKING, every key of that slot reads as
// absent, the counts still on the first master included. Undeclared, each
// request's keys are checked at its own first access, on the master the
// client chose, and a request not served there is sent again alone.
func appendScriptCall(dst []interface{}, s *luaScript, source, cross bool, calls []*call, ruleArgs []interface{}) []interface{} {
	hash, src := s.hash, s.src
	if cross {
		hash, src = s.nodeHash, s.nodeSrc
	}
	if source {
		dst = append(dst, "eval", src, 0)
	} else {
		dst = append(dst, "evalsha", hash, 0)
	}
	if cross {
		n := 0
		for _, c := range calls {
			n += len(c.keys)
		}
		dst = append(dst, countArg(n))
	}
	for _, c := range calls {
		for i := range c.keys {
			dst = append(dst, &c.keys[i])
		}
	}
	if !cross {
		dst[2] = len(dst) - 3 // the number of keys
	}
	dst = append(dst, ruleArgs...)
	if !allUnit(calls) {
		for _, c := range calls {
			dst = append(dst, c.args...)
		}
	}
	return dst
}

// crossKeyPos is the position of a cross call's first key in its
// command: after EVALSHA, the hash, 0 keys and the number of keys.
const crossKeyPos = 4

// countArg returns n as a script argument, boxed once for small n.
func countArg(n int) interface{} {
	if n < len(costArgs) {
		return costArgs[n]
	}
	return strconv.Itoa(n)
}

// allUnit reports whether every call consumes 1, so that the script call
// needs no argument per request (see lua/policy.lua).
func allUnit(calls []*call) bool {
	for _, c := range calls {
		if !c.unit {
			return false
		}
	}
	return true
}

// parseReply reads the next request's answer from the script's flat reply
// (see lua/policy.lua), two or three integers per rule, or an error message
// in integers. It appends the answer to dst in the form buildResult reads
// (allowed, then per rule allowed, remaining, retry, reset, delay) and
// returns the rest of the reply.
func parseReply(reply []int64, rules int, dst []int64) ([]int64, []int64, error) {
	if len(reply) > 0 && reply[0] < 0 {
		msg, rest, err := scriptErrorIn(reply)
		if err != nil {
			return dst, nil, err
		}
		return dst, rest, msg
	}
	start := len(dst)
	dst = append(dst, 1)
	for i := 0; i < rules; i++ {
		if len(reply) < 2 || reply[0] < 0 || reply[0]&1 == 1 && len(reply) < 3 {
			return dst[:start], nil, fmt.Errorf("sluice: script reply too short or malformed for rule %d of %d (%d values left)", i+1, rules, len(reply))
		}
		h, reset, extra := reply[0], reply[1], int64(0)
		if h&1 == 1 {
			extra, reply = reply[2], reply[3:]
		} else {
			reply = reply[2:]
		}
		if h&2 == 0 { // denied: extra is the retry
			dst[start] = 0
			dst = append(dst, 0, h>>2, extra, reset, 0)
		} else { // admitted: extra is the delay
			dst = append(dst, 1, h>>2, 0, reset, extra)
		}
	}
	return dst, reply, nil
}

// scriptErrorIn decodes the error message that begins reply: -(length+1),
// then the message's bytes six to an integer (see put_error in
// lua/policy.lua). It returns the error and the rest of the reply.
func scriptErrorIn(reply []int64) (scriptError, []int64, error) {
	n := int(-reply[0] - 1)
	words := (n + 5) / 6
	if n < 0 || n > maxScriptError || len(reply) < 1+words {
		return "", nil, fmt.Errorf("sluice: script reply holds a malformed error of %d bytes", n)
	}
	msg := make([]byte, 0, 6*words)
	for _, w := range reply[1 : 1+words] {
		for shift := 40; shift >= 0; shift -= 8 {
			msg = append(msg, byte(w>>shift))
		}
	}
	return scriptError(msg[:n]), reply[1+words:], nil
}

// maxScriptError is the longest error message the script sends whole.
const maxScriptError = 600

// scriptError is one request's error inside a script reply, such as
// "WRONGTYPE Operation against a key holding the wrong kind of value". It
// is a reply from Redis (redis.Error), so it says nothing about Redis's
// health.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks scriptError as an error Redis replied with.
func (scriptError) RedisError() {}
