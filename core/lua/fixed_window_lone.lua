-- fixed_window_lone.lua: the lone loop of FixedWindow (fixed_window.lua),
-- right after head.lua, before the script makes any function. It decides
-- the requests of a call of one FixedWindow rule in the integer form
-- (its parameter c is 1) that consume, as fw_take and policy.lua's
-- one-rule loop do, in the main chunk: no function made or called for
-- them. lone, written by the client just before this file, is true when
-- the call's one rule is a FixedWindow (see core/script.go).
--
-- Each request takes its n events with INCRBY, and its answer follows
-- from the value INCRBY returns:
--   - a count of the current window (its tag): admitted while the count
--     is within the rate; otherwise the events are given back (DECRBY)
--     and the request is denied;
--   - a missing key (tag 0), a value of a window gone by, or one out of
--     the form's range: the window starts with the n events, written
--     with the TTL of the window's end (SET ... PX);
--   - a window ahead (Redis's clock stepped back): the events are given
--     back, and the loop stops there, having written nothing for it.
-- It also stops, having written nothing, at a request that does not
-- consume (Peek), that asks for more than the rate (never admissible),
-- or whose INCRBY fails (a value of the string form, one written from
-- outside, a key of another type): the general path decides that
-- request and the rest, in order, as it would have. A SET that fails
-- stops it with its error in failed, for policy.lua to answer, as the
-- one-rule loop answers fw_take's; the INCRBY before it stays, as in
-- fw_take. (Neither it nor an undo can fail in practice: the key holds
-- the integer INCRBY just returned, DECRBY takes it back to the value it
-- had, and Redis refuses a write for want of memory only at a script's
-- first, the INCRBY; nothing else runs in between.) When it has decided
-- them all, the call ends here. TestLoneLoopsDecideAsTheGeneralPath
-- holds it to the general path's answers, writes and TTLs.
--
-- The window, its tag and its end are the call's (one instant for all
-- its requests); the TTL, rounded up to whole milliseconds as ttl_ms
-- does, is formatted at the first write that needs it. The constants are
-- fixed_window.lua's: 2^32 (the count's place), 2^20 tags, half of them
-- ahead, and 2^53 (the form's bound).
if lone and ARGV[off + 6] == '1' then
  local tick = 1
  if ARGV[off + 3] ~= '1' then
    tick = ARGV[off + 3] + 0
  end
  local rate, period = ARGV[off + 4] + 0, ARGV[off + 5] + 0
  local now = (now_us - now_us % tick) / tick -- idiv(now_us, tick)
  local w = (now - now % period) / period -- the window, idiv(now, period)
  local tag = w % 1048576 + 1
  local reset = ((w + 1) * period - now) * tick -- until the window ends, µs
  local ms -- the TTL of a new window's value, once needed
  while d <= count do
    local n = unit or ARGV[base + d - 1] + 0
    if n <= 0 or n > rate then
      break
    end
    local ns = '1'
    if n ~= 1 then
      ns = format('%d', n)
    end
    local key = KEYS[d]
    local x = pcall_redis('INCRBY', key, ns)
    if type(x) ~= 'number' then
      break -- nothing written: the general path decides, and answers its error
    end
    local c -- the current window's count, the n events included; nil: a new window
    if x >= 0 and x < 9007199254740992 then
      c = x % 4294967296
      local t = (x - c) / 4294967296
      if t == 0 then
        c = nil -- a missing key
      else
        local ahead = (t - tag) % 1048576 -- as fw_ahead reads it (t may pass 2^20)
        if ahead >= 524288 then
          c = nil -- a window gone by
        elseif ahead > 0 then
          call('DECRBY', key, ns) -- a window ahead: left to fw_take (ahead_alive)
          break
        end
      end
    end
    if not c then
      if not ms then
        local us = reset
        local r = us % 1000
        if r ~= 0 then
          us = us - r + 1000
        end
        ms = format('%d', us / 1000)
      end
      local e = pcall_redis('SET', key, format('%d', tag * 4294967296 + n), 'PX', ms)
      if e.err then
        failed = e
        break
      end
      replies[top + 1], replies[top + 2] = (rate - n) * 4 + 2, reset
      top = top + 2
    elseif c <= rate then
      replies[top + 1], replies[top + 2] = (rate - c) * 4 + 2, reset
      top = top + 2
    else
      call('DECRBY', key, ns)
      c = c - n
      local h, before = 1, 0 -- remaining 0 (never less), denied; reset_before
      if c < rate then
        h = (rate - c) * 4 + 1
      end
      if c > 0 then
        before = reset
      end
      replies[top + 1], replies[top + 2], replies[top + 3] = h, before, reset
      top = top + 3
    end
    d = d + 1
  end
  if d > count then
    return replies
  end
end
