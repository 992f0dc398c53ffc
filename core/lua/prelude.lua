-- prelude.lua: helpers shared by every algorithm. sluice concatenates
-- prelude.lua, the files of a limiter's algorithm (of all six for a policy
-- of several algorithms) and policy.lua into one script (core/script.go).
--
-- Lua numbers are doubles. Every quantity sluice computes is an integer
-- below 2^52 (core/compile.go bounds the rules' parameters by 2^50; time in
-- microseconds reaches 2^52 in the year 2112), where doubles are exact. A
-- quotient a/b of such integers rounds, but never across an integer: one
-- that is not whole is at least 1/b from the nearest integer, more than
-- half the spacing of doubles near a/b (at most a/b × 2^-53). So floor(a/b)
-- is exact, and so is a % b, which Lua computes as a - floor(a/b) × b,
-- while |a| + b < 2^53; idiv and ceildiv are built on it. All arithmetic
-- here is exact integer arithmetic, identical to the int64 arithmetic of
-- the Go twin (core/local.go).
--
-- % runs as one instruction of the Lua machine; math.floor would be a
-- call from Lua into C, which costs Redis several hundred instructions,
-- and a decision makes several divisions.

-- Every algorithm is a function
--   alg(key, now, a, b, c, n, tick, d, e) -> ok, avail, retry, reset_before, reset_after, delay, write[, after[, keep[, ttl]]]
-- with now in ticks, a/b/c/d/e the rule's parameters (see each file), n the
-- cost, tick the microseconds per tick (for sliding_window_log's TTL):
--   ok            true when n events are admissible now
--   avail         unit events admissible now, before consuming
--   retry         ticks until n events are admissible (0 when ok)
--   reset_before  ticks until the key is untouched, as it is now
--   reset_after   ticks until the key is untouched once n are consumed (when ok)
--   delay         ticks the admitted events wait before proceeding (LeakyBucket)
--   write         when ok: the key's new value, a string that policy.lua
--                 stores with SET ... PX ttl (one command: the value and
--                 its TTL together), or with SET ... KEEPTTL when keep;
--                 or a function that writes, for sliding_window_log. Only
--                 called or stored when every rule of the policy admits.
--   after         optional: unit events admissible once n are consumed
--                 (default avail - n)
--   keep          optional: true when the key already expires when its new
--                 value will need it to (the end of the window it was
--                 written in, for the window algorithms): policy.lua then
--                 stores write with SET ... KEEPTTL, sparing Redis a rewrite
--                 of the key's expiry; or, for the integer forms of
--                 fixed_window, sliding_window_counter and the meters, a decimal
--                 string: the amount to add to the stored integer with
--                 INCRBY, which keeps the TTL too and updates it in place.
--                 write is then the new value as a number; when INCRBY
--                 does not answer it (Redis does not take a value written
--                 from outside, such as "0123", for an integer), write
--                 replaces the stored value with SET ... KEEPTTL
--   ttl           optional: the TTL, in ticks, to store write with when
--                 not keep (default reset_after; the meters round it up
--                 to the end of a cell, see cell_ttl)
-- No algorithm writes anything before write is called. (fw_take and
-- swc_take, which policy.lua calls instead of fixed_window and
-- sliding_window_counter for a lone rule's consuming request, and for one
-- rule of a policy once every other rule admits, write first and undo it;
-- see fixed_window.lua.)

-- Globals are table lookups on every use; locals are not. (redis.pcall
-- is two: about 250 of Redis's instructions on every decision that
-- writes with INCRBY.)
local call, match, format, tonumber, type = redis.call, string.match, string.format, tonumber, type
local pcall_redis = redis.pcall

-- idiv returns floor(a / b) exactly, for b > 0 and |a| + b < 2^53.
local function idiv(a, b)
  return (a - a % b) / b
end

-- ceildiv returns ceil(a / b) exactly, for b > 0 and |a| + b < 2^53.
local function ceildiv(a, b)
  local r = a % b
  if r == 0 then
    return a / b
  end
  return (a - r) / b + 1
end

-- int formats an integer in full; tostring would print 1.76e+15.
local function int(x)
  return format('%d', x)
end

-- ttl_ms is a TTL of ticks (of tick microseconds) in whole milliseconds,
-- rounded up and at least 1: a TTL is never 0 and never forever. It is
-- a decimal string, as is every number sluice hands to redis.call: Redis
-- formats a Lua number argument with %.17g, which costs it more than
-- Lua's %d (and a literal such as '1' costs nothing).
local function ttl_ms(ticks, tick)
  local us = ticks * tick
  local r = us % 1000
  if r ~= 0 then
    us = us - r + 1000
  end
  if us < 1000 then
    return '1'
  end
  return format('%d', us / 1000)
end

-- ahead_alive reports whether key, whose value the window algorithms read
-- as of a window that starts ticks from now (Redis's clock stepped back
-- behind it), has a TTL reaching that window's start, as every such value
-- is written with. One without (PERSIST), or with a shorter one, holds a
-- window gone by whose tag has come round again. (Asked only of a window
-- ahead, after a clock step back: rare.)
local function ahead_alive(key, ticks, tick)
  return call('PTTL', key) * 1000 >= ticks * tick
end

-- The meters (meter.lua) keep a key until the tick its state is back to
-- untouched (full, or empty), and the sliding log until the tick its
-- newest event leaves the window; both move with every write. Moving the
-- key's expiry with them costs Redis about a sixth of a decision, so they
-- set it further, at the end of the cell holding that tick (cells aligned
-- to the Unix epoch: for the meters the period, or the time to refill (or
-- drain) the burst when that is shorter; for the log the period), and
-- keep it (INCRBY, SET ... KEEPTTL, or no PEXPIRE) while later writes are
-- done within the same cell: a key hit again within a cell, as a busy one
-- is, moves its expiry once a cell at most. A key outlives its use by less
-- than a cell: a meter's TTL is at most the time to refill its burst plus
-- the shorter of that time and the period; the log's twice its period.
--
-- cell_ttl returns whether the key keeps its TTL, and otherwise the TTL to
-- write, in ticks from now. done is the tick the new state is done at
-- (untouched, or its newest event gone); was is the tick the stored state
-- was done at, or an earlier one (nil with no stored state). Every write
-- sets the key's expiry at the end of the cell of its done, or keeps a
-- later one: so when done lies in was's cell, the key already lives long
-- enough. (A value written from outside, or whose TTL was removed, has no
-- such expiry: it gets one at its first write in another cell. So has a
-- GCRA value written by an earlier version, which expired with its TAT:
-- its form is the same.)
local function cell_ttl(was, done, now, cell)
  local end_ = done - done % cell + cell
  return was and was - was % cell + cell == end_, end_ - now
end
