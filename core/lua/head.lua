-- head.lua: the start of every call, the part of policy.lua's driver that
-- runs before any function of the script is made (see core/script.go):
-- the time, the rule count and the requests. A lone loop (its
-- algorithm's *_lone.lua: the meters', FixedWindow's and
-- SlidingWindowCounter's) may follow and decide every request of the call
-- before the rest of the script makes the functions and tables of the
-- general path: each call makes anew every function the script defines,
-- and a call of one request of one rule, a lone caller's, is the
-- commonest of all. See policy.lua for the arguments and the reply.
if redis.replicate_commands and not redis.REDIS_VERSION_NUM then
  -- Redis 6 set to lua-replicate-commands no would replicate the script
  -- verbatim and refuse a write after TIME; 7, which has
  -- REDIS_VERSION_NUM, always replicates effects (a call into C spared)
  redis.replicate_commands()
end
-- Numbers from Redis and from the client are made numbers by arithmetic
-- (x + 0), not by tonumber: Lua 5.1's tonumber is a call into C that
-- converts its argument twice (lua_isnumber, then lua_tonumber), 1,300 to
-- 2,000 of Redis's instructions against 500 to 800. Every argument the
-- client sends is a decimal integer; a stored value, which could be
-- anything, is still read with tonumber (nil when it is not a number).
local time = call('TIME')
local now_us = time[1] * 1000000 + time[2]

local R = 1 -- rules, compared as a string first: one rule is the commonest
if ARGV[off + 1] ~= '1' then
  R = ARGV[off + 1] + 0
end
local base = off + 2 + 7 * R -- ARGV[base] is the first request's cost
local count = #ARGV - base + 1
local unit = false -- 1 when every request consumes 1 and has no argument
if count == 0 then
  count = #KEYS / R
  unit = 1
end

-- the answers, flat; top is the index of the last one written
local replies, top = {}, 0
local d = 1 -- the first request not yet decided
-- failed, when set, is the error of request d, which wrote nothing (but a
-- window's INCRBY before a SET that failed, as in fw_take: see
-- fixed_window_lone.lua); policy.lua answers d with it and goes on
local failed
