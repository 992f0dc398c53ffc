-- gcra.lua: GCRA, the generic cell rate algorithm. One string key holds the
-- theoretical arrival time (TAT): when the key would be back to full if
-- nothing more arrived. A request of n events is admitted when
-- TAT + n × emission − now <= burst × emission, and then moves TAT forward by
-- n × emission. It admits exactly what TokenBucket admits, with one value.
--
-- KEYS: the rule's key, a string "<ticks>:<rem>": TAT = ticks + rem / a.
-- (The emission interval period/rate is rarely a whole number of ticks; the
-- remainder keeps TAT exact instead of rounding every event.)
-- Params: a = units per tick, b = units per event (the emission interval is
-- b/a ticks), c = burst in units (burst × b).
-- Returns the common shape (prelude.lua).
local function gcra(key, now, rate, event, cap, n)
  local debt = 0 -- TAT − now, in units
  local v = call('GET', key)
  if v then
    local tat, rem = match(v, '^(%d+):(%d+)$')
    tat = tonumber(tat)
    if tat and tat >= now then
      if tat - now > ceildiv(cap, rate) then -- the clock stepped back
        debt = cap
      else
        debt = (tat - now) * rate + tonumber(rem)
        if debt > cap then
          debt = cap
        end
      end
    end
  end
  local need = n * event
  local avail = idiv(cap - debt, event)
  local reset_before = ceildiv(debt, rate)
  if debt + need > cap then
    return false, avail, ceildiv(debt + need - cap, rate), reset_before, 0, 0, nil
  end
  local after = debt + need
  local reset_after = ceildiv(after, rate)
  local whole = idiv(after, rate)
  return true, avail, 0, reset_before, reset_after, 0, format('%d:%d', now + whole, after - whole * rate)
end
