-- sliding_window_counter_lone.lua: the lone loop of SlidingWindowCounter
-- (sliding_window_counter.lua), after head.lua (and any lone loop before
-- it in the script), before the script makes any function. It decides
-- the requests of a call of one SlidingWindowCounter rule in the integer
-- form (its parameter c, place, is not 0) that consume, as swc_take and
-- policy.lua's one-rule loop do, in the main chunk: no function made or
-- called for them. lone, written by the client just before this file, is
-- true when the call's one rule is a SlidingWindowCounter (see
-- core/script.go).
--
-- Each request adds its n events with INCRBY, and its answer follows from
-- the value INCRBY returns, as in swc_take (swc_window's cases, then
-- swc_decide's arithmetic, written out for the current window, where
-- now is never before the window's start):
--   - the current window's counts (its tag): admitted when the estimate
--     leaves room for the n events; otherwise they are given back (DECRBY)
--     and the request is denied;
--   - the previous window's counts (the tag before), a missing key (tag
--     0), a window gone by, or a value out of the form's range: a new
--     window, whose previous count is the previous window's current count
--     less the n events just added, or 0 for a missing key or a window
--     gone by; admitted, it is written with the TTL of the next window's
--     end (SET ... PX), and denied (only with a previous count), the
--     events are given back;
--   - a window ahead (Redis's clock stepped back): the events are given
--     back, and the loop stops there, having written nothing for it.
-- It also stops, having written nothing, at a request that does not
-- consume (Peek), that asks for more than the rate (never admissible),
-- or whose INCRBY fails (the string form, a value written from outside, a
-- key of another type): the general path decides that request and the
-- rest, in order, as it would have. A SET that fails stops it with its
-- error in failed, for policy.lua to answer, as the one-rule loop answers
-- swc_take's; the INCRBY before it stays, as in swc_take (neither it nor
-- an undo can fail in practice: see fixed_window_lone.lua). When it has
-- decided them all, the call ends here.
-- TestLoneLoopsDecideAsTheGeneralPath holds it to the general path's
-- answers, writes and TTLs. A change to swc_take, swc_window or
-- swc_decide is a change here. (Its first lines, up to the INCRBY, and
-- its end are fixed_window_lone.lua's, as swc_take's are fw_take's: each
-- algorithm's own script carries its loop only, and one loop for both
-- would have to tell them apart by their codes, which only
-- core/algorithms.go lists.)
if lone and ARGV[off + 6] ~= '0' then
  local tick = 1
  if ARGV[off + 3] ~= '1' then
    tick = ARGV[off + 3] + 0
  end
  local rate, period, place, tags = ARGV[off + 4] + 0, ARGV[off + 5] + 0, ARGV[off + 6] + 0, ARGV[off + 7] + 0
  local now = (now_us - now_us % tick) / tick -- idiv(now_us, tick)
  local e = now % period -- elapsed in the current window
  local w = (now - e) / period -- the window, idiv(now, period)
  local tag = w % tags + 1
  local cap = rate * period
  local after = (2 * period - e) * tick -- reset_after, µs: the next window's end
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
    local p, c = 0, nil -- the previous window's count; the current one's before n (nil: a new window)
    if x >= 0 and x < 9007199254740992 then
      local cx = x % place
      local y = (x - cx) / place
      local px = y % place
      local t = (y - px) / place
      if t == tag then
        p, c = px, cx - n
      elseif t ~= 0 then
        local ahead = (t - tag) % tags
        if ahead == tags - 1 then
          p = cx - n -- the previous window's: its current count is now the previous one
        elseif ahead <= tags - 8 then
          call('DECRBY', key, ns) -- a window ahead: left to swc_take (ahead_alive)
          break
        end
      end
    end
    -- swc_decide(w, p, c or 0, now, rate, period, n)
    local cn = c or 0
    local used = p * (period - e) + cn * period
    local avail = 0
    if used < cap then
      avail = cap - used
      avail = (avail - avail % period) / period
    end
    if used + n * period <= cap then
      if not c then
        if not ms then
          local us = after -- ttl_ms(reset_after, tick)
          local r = us % 1000
          if r ~= 0 then
            us = us - r + 1000
          end
          ms = format('%d', us / 1000)
        end
        local s = pcall_redis('SET', key, format('%d', (tag * place + p) * place + n), 'PX', ms)
        if s.err then
          failed = s
          break
        end
      end
      replies[top + 1], replies[top + 2] = (avail - n) * 4 + 2, after
      top = top + 2
    else
      call('DECRBY', key, ns) -- (a new window is denied only with a previous count: the key was there)
      local retry
      local room = (rate - cn - n) * period
      if room >= 0 then
        -- within this window, once previous × (period − e') <= room (p > 0 here)
        retry = period - (room - room % p) / p - e
      else
        -- in the next window, where the previous count is cn and the current 0
        local r = (rate - n) * period
        local e2 = period - (r - r % cn) / cn
        if e2 < 0 then
          e2 = 0
        end
        retry = period - e + e2
      end
      local before = 0 -- reset_before, µs
      if cn > 0 then
        before = after
      elseif p > 0 then
        before = (period - e) * tick
      end
      replies[top + 1], replies[top + 2], replies[top + 3] = avail * 4 + 1, before, retry * tick
      top = top + 3
    end
    d = d + 1
  end
  if d > count then
    return replies
  end
end
