-- meter.lua: the three meters, LeakyBucket, TokenBucket and GCRA, share one
-- state and this one function. A meter of capacity `cap` units holds the
-- events taken and not yet refilled (or drained) at `rate` units per tick;
-- a request of n events is admitted when they fit. Its key holds the
-- theoretical arrival time (TAT): the tick the meter is back to untouched
-- (full, or empty) if nothing more arrives. So the debt at now is
-- (TAT − now) × rate, one value for what a bucket keeps as two (a level and
-- the time it was measured). A GCRA, a token bucket refilled continuously
-- and a leaky bucket drained continuously admit exactly the same requests;
-- the leaky bucket also delays each admitted one by the time for the debt
-- ahead of it to drain (see leaky_bucket.lua).
--
-- KEYS: the rule's key, a string "<ticks>:<rem>": TAT = ticks + rem / a,
-- or "<ticks>" alone when rem is 0. (The emission interval period/rate is
-- not always a whole number of ticks; the remainder keeps TAT exact instead
-- of rounding every event. When it is whole, as for 10 per second, rem is
-- always 0, and the one-number form spares the script a pattern match and
-- half its formatting: a tenth of a decision's work in Redis, for a key
-- read again before it expires. Redis also stores such a value as an
-- integer, in less memory, and a write that keeps the key's TTL (see
-- cell_ttl) adds to it with INCRBY.) A value of another form is no state.
-- Params: a = units per tick, b = units per event (the emission interval is
-- b/a ticks), c = capacity in units (burst × b), d = how the meter treats
-- what it admits: -2 polices (GCRA, TokenBucket: admitted requests proceed
-- at once); -1 shapes (LeakyBucket: each waits its delay); d >= 0 shapes
-- and also denies a request whose delay would exceed d ticks
-- (core.WithMaxDelay). e = the cells of the key's TTL, in ticks (see
-- cell_ttl).
-- Returns the common shape (prelude.lua); when it shapes, delay is set when
-- ok, and with a delay bound the remaining count after consuming is the
-- eighth value (not simply avail - n when the bound binds).
--
-- Redis's clock may step back behind a stored TAT. The meter then holds
-- the debt the TAT says, plus the rate times the step: time the clock has
-- to run again before it refills. When that passes the capacity, the
-- request is denied with the exact wait. (Stricter than before the step,
-- never looser.) So is a TAT further ahead than the capacity reaches only
-- when the key's TTL reaches it too, as every TAT written here does (see
-- ahead_alive): one written from outside without (any TAT up to 2^52, or
-- a remainder of rate or more) is no state, not a debt of centuries that a
-- denial, which writes nothing, would never heal.

-- meter_admissible counts the unit events admissible one after another at
-- debt l: each must fit in the capacity cap and, with a bound (maxdelay >=
-- 0), wait at most maxdelay (an event waits ceil(l / rate) ticks, so it
-- fits while l <= maxdelay × rate).
local function meter_admissible(l, rate, event, cap, maxdelay)
  local count = idiv(cap - l, event)
  if maxdelay >= 0 then
    local bound = maxdelay * rate
    local by_delay = 0
    if l <= bound then
      by_delay = idiv(bound - l, event) + 1
    end
    if by_delay < count then
      count = by_delay
    end
  end
  return count
end

-- meter decides one rule (see the top of this file).
local function meter(key, now, rate, event, cap, n, tick, maxdelay, cell)
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
    if tat and not (tat < 4503599627370496 and tat % 1 == 0 and rem < rate) then
      -- 2^52 ticks or more, or not a whole number, never written here
      -- ("inf", "1e300", "nan", "12.5", written from outside, which Lua
      -- reads as numbers), nor a remainder of a whole tick or more: no
      -- state, not a debt that never ends (NaN fails every comparison)
      tat, whole_form = nil, nil
    end
    if tat and tat >= now then
      local ahead = tat - now
      debt = ahead * rate + rem
      -- More debt than the capacity holds: the clock stepped back. Denied,
      -- with the exact wait. (Far back, ahead × rate passes 2^53 and
      -- rounds; but rounding never brings a sum above cap down to cap,
      -- since cap + 1 is a double.) Unless the key's TTL falls short of
      -- the TAT: then no state (see the top of this file).
      if debt > cap and not ahead_alive(key, tat, tick) then
        tat, whole_form, debt = nil, nil, 0
      elseif debt > cap then
        local x = rem + need - cap -- admitted r ticks on, once (ahead - r) × rate <= -x
        local retry
        if x >= 0 then
          retry = ahead + ceildiv(x, rate)
        else
          retry = ahead - idiv(-x, rate)
        end
        local reset = ahead + ceildiv(rem, rate)
        if maxdelay >= 0 and reset - maxdelay > retry then
          retry = reset - maxdelay -- and once its delay is within the bound
        end
        return false, 0, retry, reset, 0, 0, nil
      end
    end
    was = tat
  end
  local wait = ceildiv(debt, rate) -- until untouched; a shaped request's delay
  local avail
  if maxdelay < 0 then
    avail = idiv(cap - debt, event)
  else
    avail = meter_admissible(debt, rate, event, cap, maxdelay)
    if wait > maxdelay then
      local retry = wait - maxdelay
      if debt + need > cap then
        local r = ceildiv(debt + need - cap, rate)
        if r > retry then
          retry = r
        end
      end
      return false, avail, retry, wait, 0, 0, nil
    end
  end
  if debt + need > cap then
    return false, avail, ceildiv(debt + need - cap, rate), wait, 0, 0, nil
  end
  local delay, after = 0, nil
  if maxdelay > -2 then
    delay = wait
    if maxdelay >= 0 then
      after = meter_admissible(debt + need, rate, event, cap, maxdelay)
    end
  end
  local units = debt + need
  local rem = units % rate
  local whole = (units - rem) / rate
  local tat = now + whole
  -- (tat is the TAT's whole ticks: the TAT itself, tat + rem/rate, comes
  -- before the end of tat's cell, a whole tick)
  local keep, ttl = cell_ttl(was, tat, now, cell)
  if rem == 0 then
    if keep and whole_form then
      -- INCRBY moves the TAT and keeps the TTL, in place: about an eighth
      -- of a decision's work in Redis less than SET ... KEEPTTL
      return true, avail, 0, wait, whole, delay, tat, after, format('%d', tat - was)
    end
    return true, avail, 0, wait, whole, delay, format('%d', tat), after, keep, ttl
  end
  return true, avail, 0, wait, whole + 1, delay, format('%d:%d', tat, rem), after, keep, ttl
end
