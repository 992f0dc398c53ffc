-- fixed_window.lua: FixedWindow. Counts events per window of `period` ticks,
-- windows aligned to the Unix epoch, so all keys share window edges.
--
-- KEYS: the rule's key, a string "<window index>:<count>".
-- Params: a = rate (events per window), b = period (ticks), c, d unused.
-- Returns the common shape (prelude.lua). The stored window index, not the
-- TTL, decides which window a count belongs to; the TTL (the window's end)
-- only frees the memory. It is set by the window's first write and kept by
-- the others (keep), since the window's end does not move.
--
-- Known weakness: Rate events at the end of one window and Rate more at the
-- start of the next are all admitted, up to 2×Rate within one Period.
local function fixed_window(key, now, rate, period, _, n)
  local w = idiv(now, period)
  local c = 0
  local keep = false
  local v = call('GET', key)
  if v then
    local sw, sc = match(v, '^(%d+):(%d+)$')
    sw = tonumber(sw)
    if sw and sw >= w then -- (sw > w only if the clock stepped back)
      w = sw
      c = tonumber(sc)
      keep = true
    end
  end
  local left = (w + 1) * period - now -- ticks until the window ends
  local reset_before = 0
  if c > 0 then
    reset_before = left
  end
  if c + n > rate then
    return false, rate - c, left, reset_before, 0, 0, nil
  end
  return true, rate - c, 0, reset_before, left, 0, format('%d:%d', w, c + n), nil, keep
end
