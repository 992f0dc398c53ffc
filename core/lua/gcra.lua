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
  local need = n * event
  local v = call('GET', key)
  if v then
    local tat, rem = match(v, '^(%d+):(%d+)$')
    tat = tonumber(tat)
    if tat and tat >= now then
      rem = tonumber(rem)
      local ahead = tat - now
      -- More debt than the burst holds: the clock stepped back. Denied,
      -- with the exact wait (the first test keeps ahead × rate small).
      if ahead > ceildiv(cap, rate) or ahead * rate + rem > cap then
        local x = rem + need - cap -- admitted r ticks on, once (ahead - r) × rate <= -x
        local retry
        if x >= 0 then
          retry = ahead + ceildiv(x, rate)
        else
          retry = ahead - idiv(-x, rate)
        end
        return false, 0, retry, ahead + ceildiv(rem, rate), 0, 0, nil
      end
      debt = ahead * rate + rem
    end
  end
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
