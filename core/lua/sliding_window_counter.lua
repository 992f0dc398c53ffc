-- sliding_window_counter.lua: SlidingWindowCounter. Approximates the count
-- in the trailing period by weighting the previous window's count by how much
-- of it the trailing period still overlaps:
--   estimate = previous × (period − elapsed) / period + current
-- Windows are aligned to the Unix epoch. The estimate assumes the previous
-- window's events were spread evenly; when they were bunched at its end, a
-- true trailing period can hold up to (but never reaching) 2×rate.
--
-- KEYS: the rule's key, one integer (tag × place + previous) × place +
-- current, where place is the power of two above 2 × rate (so a count
-- with n more events, n <= rate, stays below it) and the tag names the
-- window: its index modulo `tags` (the most that stay below 2^53), plus 1.
-- Or, for rates of 2^20 or more, where fewer than 2^11 tags would be left
-- (place = 0), a string "<window index>:<previous count>:<current count>";
-- a rule that uses the integer form reads that form too, and rewrites it.
-- The stored window decides which window the counts belong to; the TTL
-- (the end of the next window) only frees the memory. As for FixedWindow
-- (see fixed_window.lua), the integer form lets a request take its events
-- with one INCRBY, which keeps the TTL and returns the counts with their
-- window (see swc_take).
-- A value lives at most a few milliseconds into the window after the
-- next, so a tag one window behind the current one is the previous
-- window's, two to seven behind (a margin to spare) one gone by, and any
-- other tag is one of a window ahead, when the key's TTL agrees (see
-- ahead_alive): Redis's clock stepped back, and the counts are kept. Such
-- a window is read as the nearest one ahead with its tag, which is the
-- right one unless the clock stepped back by more than `tags` windows
-- (2,047 at the fewest, for rates from 2^19 to 2^20: 34 minutes of
-- one-second windows; over 2^30 below a rate of 1,000): then the wait
-- until that window comes round again is reported short by the windows of
-- the missing turns; and a step back of a whole number of turns less one
-- to seven windows, the first of them from 2,040 windows on at the
-- fewest, reads as a window gone by (the counts are lost). The string form
-- names its window whole, and is read as of a window ahead only when the
-- key's TTL agrees too.
-- Params: a = rate, b = period (ticks), c = place (0: the string form),
-- d = tags.
-- Returns the common shape (prelude.lua). All comparisons are scaled by
-- period, so they are exact integers.

-- swc_window returns the window key's integer value x holds counts of,
-- relative to the window w of time now (w - 1, w, or a window ahead), its
-- previous count and its current count; or nil when x holds no window
-- within reach (a missing key incremented, a window gone by, a value out
-- of the form's range, NaN included). x is a whole number: INCRBY's
-- reply, or a stored value that sliding_window_counter has found whole (a
-- fraction, written from outside, is no state).
local function swc_window(key, x, now, w, period, tick, place, tags)
  if not (x >= 0 and x < 9007199254740992) then -- (NaN fails every comparison)
    return nil
  end
  local c = x % place
  x = (x - c) / place
  local p = x % place
  local tag = (x - p) / place
  if tag == 0 then
    return nil
  end
  local ahead = (tag - 1 - w) % tags
  if ahead == tags - 1 then
    return w - 1, p, c
  elseif ahead > tags - 8 or ahead > 0 and not ahead_alive(key, (w + ahead) * period, tick) then
    return nil
  end
  return w + ahead, p, c
end

-- swc_decide decides n events in window w of counts p (the previous
-- window's) and c at time now, returning the common shape's first five
-- values.
local function swc_decide(w, p, c, now, rate, period, n)
  local e = now - w * period -- elapsed in the current window
  local wait = 0 -- ticks until the current window starts: the clock stepped back
  if e < 0 then
    wait = -e
    e = 0
  end
  local cap = rate * period
  local used = p * (period - e) + c * period
  local avail = 0
  if used < cap then
    avail = cap - used
    avail = (avail - avail % period) / period -- idiv, written out: a Lua call costs Redis ~600 instructions
  end
  local reset_before = 0
  if c > 0 then
    reset_before = wait + 2 * period - e
  elseif p > 0 then
    reset_before = wait + period - e
  end
  if used + n * period > cap then
    local retry
    local room = (rate - c - n) * period
    if room >= 0 then
      -- within this window, once previous × (period − e') <= room (p > 0 here)
      retry = period - idiv(room, p) - e
    else
      -- in the next window, where the previous count is c and the current 0
      local e2 = period - idiv((rate - n) * period, c)
      if e2 < 0 then
        e2 = 0
      end
      retry = period - e + e2
    end
    return false, avail, wait + retry, reset_before, 0
  end
  return true, avail, 0, reset_before, wait + 2 * period - e
end

local function sliding_window_counter(key, now, rate, period, place, n, tick, tags)
  local w = idiv(now, period)
  local p, c = 0, 0
  -- written in this window: its TTL already ends with the next one (also
  -- when it was written while the clock stood behind that window: the TTL
  -- was then counted from the window's start, see wait)
  local keep = false
  local stored -- the integer form of this window: add n to it
  local v = call('GET', key)
  if v then
    local x = place > 0 and tonumber(v)
    if x and x % 1 == 0 then -- (not a fraction: see swc_window)
      local sw, sp, sc = swc_window(key, x, now, w, period, tick, place, tags)
      if sw == w - 1 then
        p = sc
      elseif sw then
        w, p, c, stored = sw, sp, sc, x
      end
    else
      local sw, sp, sc = match(v, '^(%d+):(%d+):(%d+)$')
      sw = tonumber(sw)
      -- (sw > w only if the clock stepped back, and the key's TTL agrees)
      if sw == w or sw and sw > w and ahead_alive(key, sw * period, tick) then
        keep = sw == w
        w = sw
        p = tonumber(sp)
        c = tonumber(sc)
      elseif sw and sw == w - 1 then
        p = tonumber(sc)
      end
    end
  end
  local ok, avail, retry, reset_before, reset_after = swc_decide(w, p, c, now, rate, period, n)
  if not ok then
    return false, avail, retry, reset_before, 0, 0, nil
  end
  if place == 0 then
    return true, avail, 0, reset_before, reset_after, 0, format('%d:%d:%d', w, p, c + n), nil, keep
  elseif stored then
    return true, avail, 0, reset_before, reset_after, 0, stored + n, nil, int(n)
  end
  return true, avail, 0, reset_before, reset_after, 0, int(((w % tags + 1) * place + p) * place + c + n), nil, keep
end

-- swc_take is sliding_window_counter for a request that consumes, of a
-- rule that uses the integer form, in a policy of one rule or as the
-- policy's take_at (see policy.lua), as fw_take is for
-- FixedWindow: it adds the n events with INCRBY first and takes them back
-- with DECRBY when they are not admissible. In a new window (a missing
-- key, or the previous window's counts) it then writes the new window's
-- value, with its TTL, over the incremented one. So one command decides an
-- admitted request in a window already written, and two any other. It
-- returns ok, remaining (after the request when admitted, before it when
-- denied), reset (ticks) and retry (ticks; 0 when admitted); or nil when
-- the key does not hold an integer (the string form, or another type), or
-- when n exceeds the rate (never admissible; the client never sends it):
-- sliding_window_counter then decides, as for any other request. (Its
-- first lines are fw_take's, written out: a function shared by both would
-- be one more closure made and called at every decision.)
-- sliding_window_counter_lone.lua decides most requests of a lone rule so,
-- before any function is made: a change here, or to swc_window or
-- swc_decide, is one there.
local function swc_take(key, now, rate, period, place, n, tick, tags)
  if n > rate then
    return nil
  end
  local ns = '1'
  if n ~= 1 then
    ns = int(n)
  end
  local x = pcall_redis('INCRBY', key, ns)
  if type(x) ~= 'number' then
    return nil
  end
  local w = (now - now % period) / period -- idiv, written out: a Lua call costs Redis ~600 instructions
  local sw, p, c = swc_window(key, x, now, w, period, tick, place, tags)
  if sw and sw >= w then -- this window's value, or one ahead: c holds the n events
    local ok, avail, retry, reset_before, reset_after = swc_decide(sw, p, c - n, now, rate, period, n)
    if ok then
      return true, avail - n, reset_after, 0
    end
    call('DECRBY', key, ns)
    return false, avail, reset_before, retry
  end
  -- a new window: the previous window's count (less the n just added) is
  -- its previous count; a missing key (now n, without a TTL) or an older
  -- window's value has none
  if sw then
    p = c - n
  else
    p = 0
  end
  local ok, avail, retry, reset_before, reset_after = swc_decide(w, p, 0, now, rate, period, n)
  if ok then
    call('SET', key, int(((w % tags + 1) * place + p) * place + n), 'PX', ttl_ms(reset_after, tick))
    return true, avail - n, reset_after, 0
  end
  call('DECRBY', key, ns) -- (denied only with a previous count: the key was there)
  return false, avail, reset_before, retry
end
