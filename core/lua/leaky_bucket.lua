-- leaky_bucket.lua: LeakyBucket, a queue that smooths. It admits as a meter
-- of capacity `cap` draining continuously: a request is admitted when its
-- events fit in the meter (the request itself counts). An admitted request
-- waits `delay`, the time for the events ahead of it to drain, and only then
-- proceeds, so admitted requests leave evenly spaced at the rule's rate.
--
-- KEYS: the rule's key, a hash {t = time of the last update (ticks),
-- l = level in units}.
-- Params (units: one event is `event` units; the meter drains `rate` units
-- per tick): a = rate units per tick, b = units per event, c = capacity in
-- units (burst × event).
-- Returns the common shape (prelude.lua), with delay set when ok.
local function leaky_bucket(key, now, rate, event, cap, n, tick)
  local level = 0
  local v = redis.call('HMGET', key, 't', 'l')
  local t = tonumber(v[1])
  if t then
    if now < t then -- the clock stepped back: time does not run backwards here
      now = t
    end
    level = tonumber(v[2])
    local elapsed = now - t
    if elapsed >= ceildiv(level, rate) then -- checked first, so nothing overflows
      level = 0
    else
      level = level - elapsed * rate
    end
  end
  local need = n * event
  local avail = idiv(cap - level, event)
  local reset_before = ceildiv(level, rate)
  if level + need > cap then
    return false, avail, ceildiv(level + need - cap, rate), reset_before, 0, 0, nil
  end
  local after = level + need
  local reset_after = ceildiv(after, rate)
  return true, avail, 0, reset_before, reset_after, reset_before, function()
    redis.call('HSET', key, 't', int(now), 'l', int(after))
    expire(key, reset_after, tick)
  end
end
