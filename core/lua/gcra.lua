-- gcra.lua: GCRA, the generic cell rate algorithm. One string key holds the
-- theoretical arrival time (TAT): when the key would be back to full if
-- nothing more arrived. A request of n events is admitted when
-- TAT + n × emission − now <= burst × emission, and then moves TAT forward by
-- n × emission. It admits exactly what TokenBucket admits, with one value.
--
-- KEYS: the rule's key, a string "<ticks>:<rem>": TAT = ticks + rem / a,
-- or "<ticks>" alone when rem is 0. (The emission interval period/rate is
-- not always a whole number of ticks; the remainder keeps TAT exact instead
-- of rounding every event. When it is whole, as for 10 per second, rem is
-- always 0, and the one-number form spares the script a pattern match and
-- half its formatting: a tenth of a decision's work in Redis, for a key
-- read again before it expires. Redis also stores such a value as an
-- integer, in less memory, and a write that keeps the key's TTL (see
-- meter_ttl) adds to it with INCRBY.)
-- Params: a = units per tick, b = units per event (the emission interval is
-- b/a ticks), c = burst in units (burst × b), d unused, e = the cells of
-- the key's TTL, in ticks (see meter_ttl).
-- Returns the common shape (prelude.lua).
local function gcra(key, now, rate, event, cap, n, _, _, cell)
  local debt = 0 -- TAT − now, in units
  local need = n * event
  local was -- the stored TAT's whole ticks
  local whole_form -- the stored value is the one-number form
  local v = call('GET', key)
  if v then
    local tat, rem = tonumber(v), 0
    whole_form = tat
    if not tat then
      tat, rem = match(v, '^(%d+):(%d+)$')
      tat, rem = tonumber(tat), tonumber(rem)
    end
    was = tat
    if tat and tat >= now then
      local ahead = tat - now
      -- More debt than the burst holds: the clock stepped back. Denied,
      -- with the exact wait. (Far back, ahead × rate passes 2^53 and
      -- rounds; but rounding never brings a sum above cap down to cap,
      -- since cap + 1 is a double.)
      if ahead * rate + rem > cap then
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
  local rem = after % rate
  local whole = (after - rem) / rate
  local tat = now + whole
  -- (tat is the TAT's whole ticks: the TAT itself, tat + rem/rate, comes
  -- before the end of tat's cell, a whole tick)
  local keep, ttl = meter_ttl(was, tat, now, cell)
  if rem == 0 then
    if keep and whole_form then
      -- INCRBY moves the TAT and keeps the TTL, in place: about an eighth
      -- of a decision's work in Redis less than SET ... KEEPTTL
      return true, avail, 0, reset_before, whole, 0, tat, nil, format('%d', tat - was)
    end
    return true, avail, 0, reset_before, whole, 0, format('%d', tat), nil, keep, ttl
  end
  return true, avail, 0, reset_before, whole + 1, 0, format('%d:%d', tat, rem), nil, keep, ttl
end
