-- fixed_window.lua: FixedWindow. Counts events per window of `period` ticks,
-- windows aligned to the Unix epoch, so all keys share window edges.
--
-- KEYS: the rule's key, an integer tag × 2^32 + count, where the tag names
-- the window: its index modulo 2^20, plus 1. (A string "<window
-- index>:<count>" instead for a rate of 2^31 or more, where count + n may
-- not fit in 32 bits, or a period under 164.795 ms, whose 2^19 windows
-- span less than a day: see below. Both forms are read whatever the
-- rule.) The stored window, not the TTL, decides which window a count
-- belongs to; the TTL (the window's end) only frees the memory. It is set
-- by the window's first write and kept by the others, since the window's
-- end does not move.
--
-- The integer form lets a decision take its event with one command:
-- INCRBY keeps the key's TTL and returns the count with its window (see
-- fw_take), where a string needs a GET and a SET; Redis also stores it
-- in less memory. A tag is never 0, so the INCRBY of a missing key never
-- looks like a count of the current window. A value outlives its window
-- by a millisecond at most (its TTL), and is ahead of the current window
-- only when Redis's clock stepped back: 2^20 tags tell the current window
-- from a past one, and from one up to 2^19 windows ahead, that is from a
-- step back of up to a day at least. (The string form, which names the
-- window whole, keeps counting in a later window after a step back of any
-- length; a step back of more than a day is read as a new window in the
-- integer form.) A value read as of a window ahead, in either form, must
-- also have the TTL such a value is written with (see ahead_alive), so
-- that a key whose TTL was removed from outside is not taken, once its tag
-- comes round, for a window ahead, nor a string written from outside for
-- a window centuries ahead.
-- Params: a = rate (events per window), b = period (ticks), c = 1 for the
-- integer form, 0 for the string form (core/compile.go chooses, by the
-- bounds above), d unused.
-- Returns the common shape (prelude.lua).
--
-- Known weakness: Rate events at the end of one window and Rate more at the
-- start of the next are all admitted, up to 2×Rate within one Period.
--
-- The constants are written out: 4294967296 (2^32, the count's place),
-- 1048576 (2^20 tags) and 9007199254740992 (2^53, the form's bound). A
-- local for each would be one more upvalue for every function using it to
-- bind, at every script call.

-- fw_ahead returns by how many windows key's integer value x is ahead of
-- the window w of time now (0: x counts w itself; above 0 only when the
-- clock stepped back, and the key's TTL agrees: see ahead_alive), and x's
-- count; or nil when x is a past window's, or no window's (a missing key
-- incremented, or a value out of the form's range, NaN included). x is a
-- whole number: INCRBY's reply, or a stored value that fixed_window has
-- found whole (a fraction, written from outside, is no state).
local function fw_ahead(key, x, now, w, period, tick)
  if not (x >= 0 and x < 9007199254740992) then -- (NaN fails every comparison)
    return nil
  end
  local count = x % 4294967296
  local tag = (x - count) / 4294967296
  if tag == 0 then
    return nil
  end
  local ahead = (tag - 1 - w) % 1048576
  if ahead >= 524288 or ahead > 0 and not ahead_alive(key, (w + ahead) * period, tick) then
    return nil
  end
  return ahead, count
end

local function fixed_window(key, now, rate, period, integer, n, tick)
  local w = idiv(now, period)
  local c = 0
  local keep = false -- the value already holds this window: its TTL stays
  local incr = false -- ... in the integer form, this one: add n to it
  local v = call('GET', key)
  if v then
    local x = tonumber(v)
    if x and x % 1 == 0 then -- (not a fraction: see fw_ahead)
      local ahead, count = fw_ahead(key, x, now, w, period, tick)
      if ahead then
        w, c, keep, incr = w + ahead, count, true, x
      end
    else
      local sw, sc = match(v, '^(%d+):(%d+)$')
      sw = tonumber(sw)
      -- (sw > w only if the clock stepped back, and the key's TTL agrees)
      if sw == w or sw and sw > w and ahead_alive(key, sw * period, tick) then
        w, c, keep = sw, tonumber(sc), true
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
  if integer == 0 then
    return true, rate - c, 0, reset_before, left, 0, format('%d:%d', w, c + n), nil, keep
  end
  if incr then
    return true, rate - c, 0, reset_before, left, 0, incr + n, nil, int(n)
  end
  return true, rate - c, 0, reset_before, left, 0, int((w % 1048576 + 1) * 4294967296 + c + n), nil, keep
end

-- fw_take is fixed_window for a request that consumes, of a rule that uses
-- the integer form, in a policy of one rule or as the policy's take_at
-- (see policy.lua): it takes the n events with INCRBY first, and gives
-- them back (DECRBY) when they were not admissible. (fixed_window_lone.lua
-- decides most requests of a lone rule so, before any function is made:
-- a change here is one there.) An admitted request, the common case,
-- thus costs Redis one command instead of two (about a third of the
-- decision's work); a denied one costs two instead of one. It returns
-- ok, remaining (after the request when admitted, before it when denied),
-- reset (ticks), and retry (ticks; 0 when admitted); or nil when the key
-- does not hold an integer (the string form, or another type), or when n
-- exceeds the rate (never admissible; the client never sends it):
-- fixed_window then decides, as for any other request.
local function fw_take(key, now, rate, period, _, n, tick)
  if n > rate then
    return nil
  end
  local w = (now - now % period) / period -- idiv, written out: a Lua call costs Redis ~600 instructions
  local ns = '1'
  if n ~= 1 then
    ns = int(n)
  end
  local x = pcall_redis('INCRBY', key, ns)
  if type(x) ~= 'number' then
    return nil
  end
  local ahead, c = fw_ahead(key, x, now, w, period, tick)
  if ahead then
    local left = (w + ahead + 1) * period - now
    if c <= rate then
      return true, rate - c, left, 0
    end
    call('DECRBY', key, ns)
    c = c - n
    if c > 0 then
      return false, rate - c, left, left
    end
    return false, rate - c, 0, left
  end
  -- a missing key, or a past window's value (alive until its TTL, a
  -- millisecond at most): this window starts with the n events
  local left = (w + 1) * period - now
  call('SET', key, int((w % 1048576 + 1) * 4294967296 + n), 'PX', ttl_ms(left, tick))
  return true, rate - n, left, 0
end
