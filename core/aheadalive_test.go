package core

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// ahead_alive (lua/helpers.lua) tells a value ahead of Redis's clock that
// the script wrote, whose TTL reaches the instant it was written for, from
// one written from outside without such a TTL, late in a long call too:
// on Redis 7 by the key's absolute expiry (PEXPIRETIME), elsewhere (Redis
// 6, miniredis) by PTTL beside a fresh TIME: both branches run on the
// real server. A key without a TTL used to
// pass once the call had run past that instant (PTTL -1 against a time
// left below zero), and PTTL read against the call's first TIME dropped
// real state late in a long call.
func TestAheadAlive(t *testing.T) {
	helpers, err := luaFiles.ReadFile("lua/helpers.lua")
	if err != nil {
		t.Fatal(err)
	}
	// at is 50 ms past the call's start; the TTL is written as cell_ttl
	// writes one, from that start, to reach at plus ARGV[1] ms; then the
	// call runs ARGV[2] ms before it asks.
	src := "local call, format = redis.call, string.format\n" + string(helpers) + `
local time = call('TIME')
local now_us = time[1] * 1000000 + time[2]
local tick = 1000
local now = idiv(now_us, tick)
local at = now + 50
local ttl = tonumber(ARGV[1])
if ttl > -1000 then
  call('SET', KEYS[1], '7', 'PX', ttl_ms(at + ttl - now, tick))
else
  call('SET', KEYS[1], '7')
end
local t
repeat t = call('TIME') until t[1] * 1000000 + t[2] >= now_us + tonumber(ARGV[2]) * 1000
if ahead_alive(KEYS[1], at, tick) then return 1 end
return 0
`
	// Redis 6's branch, run on this Redis 7 too: a real clock under PTTL
	// (miniredis's TTLs move only when its clock is moved).
	six := strings.Replace(src, "if redis.REDIS_VERSION_NUM then", "if false then", 1)
	if six == src {
		t.Fatal("ahead_alive no longer asks for REDIS_VERSION_NUM: update the test")
	}
	m := miniredis.RunT(t)
	mini := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer mini.Close()
	real := redistest.Client(t)
	for name, run := range map[string]struct {
		c   *redis.Client
		src string
	}{"redis-server": {real, src}, "redis-server, Redis 6's branch": {real, six}, "miniredis": {mini, src}} {
		c, src := run.c, run.src
		for _, tc := range []struct {
			ttl, late int // ms past at the TTL reaches (-1000: none); ms the call runs first
			want      bool
		}{
			{-1000, 0, false}, {-1000, 5, false}, {-1000, 60, false},
			{0, 0, true}, {0, 5, true}, {1, 5, true}, {0, 60, true},
			{-10, 0, false}, {-10, 5, false},
		} {
			what := fmt.Sprintf("%s: a TTL reaching %d ms past it, asked %d ms into the call", name, tc.ttl, tc.late)
			if tc.ttl == -1000 {
				what = fmt.Sprintf("%s: no TTL, asked %d ms into the call", name, tc.late)
			}
			got, err := c.Eval(context.Background(), src, []string{"ahead-alive"}, tc.ttl, tc.late).Int()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if (got == 1) != tc.want {
				t.Errorf("%s: alive %v; want %v", what, got == 1, tc.want)
			}
		}
	}
}
