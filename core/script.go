package core

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// scriptFiles are concatenated in this order into the one script every
// decision runs: helpers, the six algorithms (the three meters are one
// function, meter.lua's), then the policy driver.
var scriptFiles = []string{
	"prelude.lua",
	"fixed_window.lua",
	"sliding_window_log.lua",
	"sliding_window_counter.lua",
	"meter.lua",
	"leaky_bucket.lua",
	"token_bucket.lua",
	"gcra.lua",
	"policy.lua",
}

// scriptSrc is the one script every decision runs; see lua/policy.lua.
var scriptSrc = scriptSource()

// policyScript holds its SHA-1 for EVALSHA.
var policyScript = redis.NewScript(scriptSrc)

// scriptHashArg and scriptSrcArg are the script's SHA-1 and source as
// command arguments, boxed once: a string put in an interface at each call
// would be copied to the heap each time.
var scriptHashArg, scriptSrcArg interface{} = policyScript.Hash(), scriptSrc

func scriptSource() string {
	var b strings.Builder
	for _, name := range scriptFiles {
		src, err := luaFiles.ReadFile("lua/" + name)
		if err != nil {
			panic("sluice: missing embedded script " + name) // a build defect, caught by every test
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return b.String()
}
