-- helpers.lua: the functions every algorithm shares (see prelude.lua).
-- They come after head.lua and the lone loops, which make no function:
-- every call makes anew each function the script defines before the
-- point where it returns, at 600 to 700 of Redis's instructions each.

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

-- ahead_alive reports whether key, whose value lies ahead of now, at tick
-- at (a window that starts then, a meter's TAT, the instant the log's
-- newest request leaves its window: Redis's clock stepped back behind it),
-- has a TTL reaching that far, as every value the script writes has. One
-- without (written from outside, or left by PERSIST), or with a shorter
-- one, is no state: for the integer window forms, a window gone by whose
-- tag has come round again. (Asked only of a value ahead, after a clock
-- step back: rare.) Redis 7 (which has REDIS_VERSION_NUM) says when the
-- key expires, PEXPIRETIME, whenever in a long call it is asked. Redis 6
-- says only how long it has left, PTTL, from its clock as it reads when
-- PTTL runs, which late in a long call is well past now: so a TIME is read
-- beside it. Either way give or take 2 ms: a TTL written here, from a
-- clock Redis may have read up to a millisecond before now, and rounded
-- to one, may end that much before the instant it was written for.
local function ahead_alive(key, at, tick)
  if redis.REDIS_VERSION_NUM then
    local e = call('PEXPIRETIME', key)
    return e >= 0 and (e + 2) * 1000 >= at * tick
  end
  local ttl = call('PTTL', key)
  if ttl < 0 then
    return false -- none (-1), or no key (-2)
  end
  local t = call('TIME')
  return (ttl + 2) * 1000 >= at * tick - (t[1] * 1000000 + t[2])
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
