-- token_bucket.lua: TokenBucket. A bucket of capacity `cap` (Burst events)
-- that starts full and is refilled continuously; a request takes n events'
-- worth of tokens or is denied. Tokens are kept in units of 1/`event` of an
-- event, so refill is exact to the tick (one microsecond) however slow the
-- rate: a key polled faster than one token's interval still refills, because
-- the fraction of a token earned is kept, not dropped.
--
-- KEYS: the rule's key, a string "<time of the last update (ticks)>/<tokens
-- in units>", both in hexadecimal (see bucket_state). A missing key is a full bucket.
-- Params: a = rate units refilled per tick, b = units per event,
-- c = capacity in units (burst × event), d unused, e = the cells of the
-- key's TTL, in ticks (see meter_ttl).
-- Returns the common shape (prelude.lua).
local function token_bucket(key, now, rate, event, cap, n, _, _, cell)
  local tokens = cap
  local lag = 0 -- ticks from now to the last update, when the clock stepped back
  local v = call('GET', key)
  local t, k, ours
  if v then
    t, k, ours = bucket_state(v)
  end
  local was = ours and t -- when the stored bucket was full, or earlier
  if t then
    if now < t then
      -- The clock stepped back: time does not run backwards here. The
      -- bucket refills from t on, so RetryAfter, ResetAfter and the TTL
      -- count lag more.
      lag = t - now
      now = t
    end
    -- refilled, up to cap (after a long gap (now - t) × rate passes 2^53
    -- and rounds; but rounding never brings a sum of cap or more below
    -- cap, a double)
    tokens = k + (now - t) * rate
    if tokens > cap then
      tokens = cap
    end
  end
  local need = n * event
  local avail = idiv(tokens, event)
  local reset_before = 0
  if tokens < cap then
    local refill = ceildiv(cap - tokens, rate)
    reset_before = lag + refill
    was = ours and now + refill
  end
  if tokens < need then
    return false, avail, lag + ceildiv(need - tokens, rate), reset_before, 0, 0, nil
  end
  local left = tokens - need
  local refill = ceildiv(cap - left, rate)
  local keep, ttl = meter_ttl(was, now + refill, now - lag, cell)
  return true, avail, 0, reset_before, lag + refill, 0, format('%x/%x', now, left), nil, keep, ttl
end
