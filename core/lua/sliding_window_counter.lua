-- sliding_window_counter.lua: SlidingWindowCounter. Approximates the count
-- in the trailing period by weighting the previous window's count by how much
-- of it the trailing period still overlaps:
--   estimate = previous × (period − elapsed) / period + current
-- Windows are aligned to the Unix epoch. The estimate assumes the previous
-- window's events were spread evenly; when they were bunched at its end, a
-- true trailing period can hold up to (but never reaching) 2×rate.
--
-- KEYS: the rule's key, a string "<current window index>:<previous
-- window's count>:<current window's count>".
-- Params: a = rate, b = period (ticks), c, d unused.
-- Returns the common shape (prelude.lua). All comparisons are scaled by
-- period, so they are exact integers.
local function sliding_window_counter(key, now, rate, period, _, n)
  local w = idiv(now, period)
  local p, c = 0, 0
  -- written in this window: its TTL already ends with the next one (also
  -- when it was written while the clock stood behind that window: the TTL
  -- was then counted from the window's start, see wait).
  local keep = false
  local v = call('GET', key)
  if v then
    local sw, sp, sc = match(v, '^(%d+):(%d+):(%d+)$')
    sw = tonumber(sw)
    if sw and sw >= w then -- (sw > w only if the clock stepped back)
      keep = sw == w
      w = sw
      p = tonumber(sp)
      c = tonumber(sc)
    elseif sw and sw == w - 1 then
      p = tonumber(sc)
    end
  end
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
    avail = idiv(cap - used, period)
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
    return false, avail, wait + retry, reset_before, 0, 0, nil
  end
  return true, avail, 0, reset_before, wait + 2 * period - e, 0, format('%d:%d:%d', w, p, c + n), nil, keep
end
