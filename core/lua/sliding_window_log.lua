-- sliding_window_log.lua: SlidingWindowLog. A sorted set with one member per
-- admitted event, scored by its time: exact for every trailing window of
-- `period` ticks. Memory is O(rate) per key: up to rate members.
--
-- KEYS: the rule's key, a sorted set; member "<time>:<index>", score <time>.
-- Params: a = rate (events per trailing period), b = period (ticks), c, d
-- unused.
-- Returns the common shape (prelude.lua). An event at time s counts while
-- now < s + period.
--
-- As the meters' (see cell_ttl), the key's expiry is the end of a cell:
-- the period-long cell, aligned to the Unix epoch, that holds the instant
-- its newest event leaves the window. A write whose newest event leaves in
-- the same cell as the one before it keeps that expiry, and also leaves
-- the events gone from the window in the set: both are done (PEXPIRE,
-- ZREMRANGEBYSCORE) once a cell, at its first write, instead of at every
-- write. An admitted event thus costs Redis three commands instead of
-- five (a fifth to a quarter of its work). The price: a key lives up to a
-- period longer than its events (its TTL is at most twice the period),
-- and the set holds up to a period's events more than the window (twice
-- the rate at most). No decision reads them: every count is by score.
-- (A key written by an earlier build, whose expiry was the instant its
-- newest event left, is never read as one of these: SlidingWindowLog
-- hashes "cell" into its fingerprint. One whose TTL was removed from
-- outside gets one at its first write in another cell.)
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
  -- the instant the newest event leaves, now and as of the last write
  -- (when the window holds its event)
  local was
  if latest >= 0 then
    was = latest + period
  end
  local keep, ttl = cell_ttl(was, now + reset_after, now, period)
  return true, rate - c, 0, reset_before, reset_after, 0, function()
    if not keep then
      call('ZREMRANGEBYSCORE', key, '-inf', from)
    end
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
    if n == 1 then
      call('ZADD', key, t, t .. ':' .. int(base)) -- the common case, without a table
    else
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
    end
    if not keep then
      call('PEXPIRE', key, ttl_ms(ttl, tick))
    end
  end
end
