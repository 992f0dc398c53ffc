-- leaky_bucket.lua: LeakyBucket, a queue that smooths. It admits as a meter
-- of capacity `cap` draining continuously: a request is admitted when its
-- events fit in the meter (the request itself counts). An admitted request
-- waits `delay`, the time for the events ahead of it to drain, and only then
-- proceeds, so admitted requests leave evenly spaced at the rule's rate.
--
-- KEYS: the rule's key, a string "<time of the last update (ticks)>/<level
-- in units>", both in hexadecimal (see bucket_state).
-- Params (units: one event is `event` units; the meter drains `rate` units
-- per tick): a = rate units per tick, b = units per event, c = capacity in
-- units (burst × event), d = the longest delay admitted, in ticks, or -1 for
-- no bound beyond the capacity (core.WithMaxDelay). A request whose delay
-- would exceed d is denied, and like every denial consumes nothing. e = the
-- cells of the key's TTL, in ticks (see meter_ttl).
-- Returns the common shape (prelude.lua), with delay set when ok, and,
-- with a delay bound, the remaining count after consuming as an eighth
-- value (it is not simply avail - n when the bound binds; without one it
-- is, the capacity alone counting).

-- leaky_admissible counts the unit events admissible one after another
-- from level l: each must fit in the meter of capacity cap and, with a
-- bound (maxdelay >= 0), wait at most maxdelay (an event waits
-- ceil(level/rate) ticks, so it fits while level <= maxdelay × rate).
local function leaky_admissible(l, rate, event, cap, maxdelay)
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

-- leaky_bucket decides one rule (see the top of this file). (Its helper is
-- a function of its own, not a closure made anew for every decision.)
local function leaky_bucket(key, now, rate, event, cap, n, _, maxdelay, cell)
  local level = 0
  local lag = 0 -- ticks from now to the last update, when the clock stepped back
  local v = call('GET', key)
  local t, l, ours
  if v then
    t, l, ours = bucket_state(v)
  end
  local was = ours and t -- when the stored meter was empty, or earlier
  if t then
    if now < t then
      -- The clock stepped back: time does not run backwards here. The meter
      -- drains from t on, so RetryAfter, ResetAfter and the TTL count lag
      -- more; an admitted request's delay does not (traffic must not stall
      -- on a clock).
      lag = t - now
      now = t
    end
    -- drained, down to 0 (after a long gap (now - t) × rate passes 2^53
    -- and rounds; but rounding never brings a difference below 0 up to 0,
    -- -1 being a double)
    level = l - (now - t) * rate
    if level < 0 then
      level = 0
    end
  end
  local need = n * event
  local avail = leaky_admissible(level, rate, event, cap, maxdelay)
  local wait = ceildiv(level, rate) -- for the events ahead to drain
  local reset_before = 0
  if level > 0 then
    reset_before = lag + wait
    was = ours and now + wait
  end
  local over_cap = level + need > cap
  local over_delay = maxdelay >= 0 and wait > maxdelay
  if over_cap or over_delay then
    local retry = 0
    if over_cap then
      retry = ceildiv(level + need - cap, rate)
    end
    if over_delay and wait - maxdelay > retry then
      retry = wait - maxdelay
    end
    return false, avail, lag + retry, reset_before, 0, 0, nil
  end
  local after = level + need
  local drain = ceildiv(after, rate)
  local keep, ttl = meter_ttl(was, now + drain, now - lag, cell)
  local write = format('%x/%x', now, after)
  if maxdelay < 0 then
    return true, avail, 0, reset_before, lag + drain, wait, write, nil, keep, ttl
  end
  return true, avail, 0, reset_before, lag + drain, wait, write, leaky_admissible(after, rate, event, cap, maxdelay), keep, ttl
end
