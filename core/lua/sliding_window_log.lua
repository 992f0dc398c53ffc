-- sliding_window_log.lua: SlidingWindowLog. A sorted set with one member per
-- admitted event, scored by its time: exact for every trailing window of
-- `period` ticks. Memory is O(rate) per key: up to rate members.
--
-- KEYS: the rule's key, a sorted set; member "<time>:<index>", score <time>.
-- Params: a = rate (events per trailing period), b = period (ticks), c, d
-- unused.
-- Returns the common shape (prelude.lua). An event at time s counts while
-- now < s + period.
local function sliding_window_log(key, now, rate, period, _, n, tick)
  local from = int(now - period) -- events scored <= from have left the window
  local c = call('ZCOUNT', key, '(' .. from, '+inf')
  local reset_before = 0
  local latest = -1 -- the newest member's time, when the window holds one
  if c > 0 then
    local newest = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    latest = newest[2] + 0 -- a score, always a number (see policy.lua on tonumber)
    reset_before = latest + period - now
  end
  if c + n > rate then
    -- the (c+n-rate)-th oldest event in the window must leave first
    local e = call('ZRANGEBYSCORE', key, '(' .. from, '+inf', 'WITHSCORES', 'LIMIT', int(c + n - rate - 1), '1')
    return false, rate - c, e[2] + period - now, reset_before, 0, 0, nil
  end
  local reset_after = period
  if reset_before > period then
    reset_after = reset_before
  end
  return true, rate - c, 0, reset_before, reset_after, 0, function()
    call('ZREMRANGEBYSCORE', key, '-inf', from)
    -- Members of one time are told apart by index, counted from the members
    -- that time already has (none of them is ever removed while it is now,
    -- even if the clock stepped back to it), so "<time>:<base+i>" is new.
    -- Unless the newest member is of now or later (several requests in one
    -- microsecond, or the clock stepped back), no member is of now: no
    -- need to count them.
    -- ZADD in chunks keeps unpack below Lua's stack limit for large costs.
    local t = int(now)
    local base = 0
    if latest >= now then
      base = call('ZCOUNT', key, t, t)
    end
    local i = 0
    while i < n do
      local args = {}
      local j = 0
      while i < n and j < 200 do
        args[j + 1] = t
        args[j + 2] = t .. ':' .. int(base + i)
        i = i + 1
        j = j + 2
      end
      call('ZADD', key, unpack(args))
    end
    call('PEXPIRE', key, ttl_ms(reset_after, tick))
  end
end
