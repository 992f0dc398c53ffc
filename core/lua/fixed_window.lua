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
-- The window of the last decision, and its text with the colon: within a
-- script call, most decisions share a window, and a value of that window
-- begins with this text. Comparing it spares a pattern match and the
-- window index's conversions both ways.
local fw_window, fw_prefix

local function fixed_window(key, now, rate, period, _, n)
  local w = idiv(now, period)
  if w ~= fw_window then
    fw_window, fw_prefix = w, format('%d:', w)
  end
  local c = 0
  local keep = false
  local v = call('GET', key)
  if v then
    local count
    if sub(v, 1, #fw_prefix) == fw_prefix then -- this window
      count = tonumber(sub(v, #fw_prefix + 1))
    end
    if count then
      c, keep = count, true
    else
      local sw, sc = match(v, '^(%d+):(%d+)$')
      sw = tonumber(sw)
      if sw and sw >= w then -- (sw > w only if the clock stepped back)
        w = sw
        c = tonumber(sc)
        keep = true
      end
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
  if w == fw_window then
    return true, rate - c, 0, reset_before, left, 0, fw_prefix .. int(c + n), nil, keep
  end
  return true, rate - c, 0, reset_before, left, 0, format('%d:%d', w, c + n), nil, keep
end
