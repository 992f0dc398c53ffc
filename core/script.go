package core

import (
	"context"
	"embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// scriptFiles are concatenated in this order into the one script every
// decision runs: helpers (prelude.lua), each algorithm's files in the order
// of algorithmTable (a file shared by several, meter.lua, once), then the
// policy driver, policy.lua, preceded by the dispatch table
// algorithmDispatch writes.
var scriptFiles = scriptFileOrder()

func scriptFileOrder() []string {
	files := []string{"prelude.lua"}
	for i := range algorithmTable {
		for _, f := range algorithmTable[i].lua {
			if !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
	}
	return append(files, "policy.lua")
}

// algorithmDispatch returns the Lua line policy.lua dispatches by: the
// algorithms' functions, each at its code (see algorithmTable), so that
// the Go table is the only list of the codes.
func algorithmDispatch() string {
	var b strings.Builder
	b.WriteString("local algorithms = { -- generated from core/algorithms.go: code i is entry i\n ")
	for i := range algorithmTable {
		b.WriteString(" ")
		b.WriteString(string(algorithmTable[i].name))
		b.WriteString(",")
	}
	b.WriteString("\n}\n")
	return b.String()
}

// scriptSrc is the one script every decision runs; see lua/policy.lua.
// nodeScriptSrc is the same script for a call whose requests lie in
// several slots of one Redis Cluster master: it declares the
// allow-cross-slot-keys flag (Redis 7) and reads every key from ARGV.
var scriptSrc, nodeScriptSrc = scriptSource(false), scriptSource(true)

// policyScript is scriptSrc, with its SHA-1 for EVALSHA.
var policyScript = redis.NewScript(scriptSrc)

// scriptHashArg and scriptSrcArg are the script's SHA-1 and source as
// command arguments, boxed once: a string put in an interface at each call
// would be copied to the heap each time; nodeHashArg and nodeSrcArg those
// of nodeScriptSrc.
var (
	scriptHashArg, scriptSrcArg interface{} = policyScript.Hash(), scriptSrc
	nodeHashArg, nodeSrcArg     interface{} = redis.NewScript(nodeScriptSrc).Hash(), nodeScriptSrc
)

// keysLine is the Lua line before policy.lua that sets its KEYS and off
// (see the top of lua/policy.lua): Redis's own, or, for nodeScriptSrc,
// every request's keys, read from the head of ARGV (it declares none).
func keysLine(node bool) string {
	if !node {
		return "local KEYS, off = KEYS, 0\n"
	}
	return `local KEYS, off = (function()
  local keys, m = {}, ARGV[1] + 0
  for i = 1, m do keys[i] = ARGV[1 + i] end
  return keys, 1 + m
end)()
`
}

func scriptSource(node bool) string {
	var b strings.Builder
	if node {
		b.WriteString("#!lua flags=allow-cross-slot-keys\n")
	}
	for _, name := range scriptFiles {
		if name == "policy.lua" {
			b.WriteString(algorithmDispatch())
			b.WriteString(keysLine(node))
		}
		src, err := luaFiles.ReadFile("lua/" + name)
		if err != nil {
			panic("sluice: missing embedded script " + name) // a build defect, caught by every test
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return b.String()
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
	return append(dst, countArg(n))
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

// run decides key by the script, in the limiter's batcher, within the
// limiter's timeout.
func (l *Limiter) run(ctx context.Context, key string, consume bool, n int) (Result, error) {
	c := getCall(callScript)
	stored := storedKey(key)
	c.keys = l.appendKeys(c.keys, stored)
	c.args = appendArgs(c.args, consume, n)
	c.unit = consume && n == 1
	if l.batch.grouping == groupNode {
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
