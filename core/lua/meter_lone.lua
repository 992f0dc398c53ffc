-- meter_lone.lua: the lone loop of the meters (meter.lua), after head.lua
-- (and any lone loop before it in the script), before the script makes
-- the functions of meter.lua and policy.lua. It decides the requests of a
-- call of one meter rule that does not bound its delay (GCRA, TokenBucket,
-- LeakyBucket without core.WithMaxDelay) and whose emission interval is a
-- whole number of ticks (as for 10 per second), so that the TAT is always
-- one whole number: meter's common case, written out here in the main
-- chunk, with no function made or called for it. lone, written by the
-- client just before this file, is true when the call's one rule is a
-- meter (see core/script.go).
--
-- It decides each request as meter does, writes as policy.lua's one-rule
-- loop does when the request consumes and is admitted, and appends its
-- answer as that loop does. It stops at the first request it leaves to
-- meter, having written nothing for it: a stored value that is not a
-- whole number below 2^52 (the "<ticks>:<rem>" form, or one written from
-- outside), or more debt than the capacity (the clock stepped back); the
-- general path decides that request and the rest, in order. A request
-- whose command fails (a key of another type, or a write Redis refuses)
-- stops it too, its error in failed, for policy.lua to answer. When it
-- has decided them all, the call ends here. TestLoneMeterAnswersAsTheMeter
-- and TestLoneLoopsDecideAsTheGeneralPath hold it to meter's answers and
-- writes. It comes before helpers.lua, so idiv, ceildiv, ttl_ms and
-- cell_ttl are written out here, as is the parameter d (compared as the
-- string it is: -2 or -1, no delay bound). The loop spares Redis about a
-- sixth of a lone GCRA call's work and a Lua call per request of a batch.
--
-- The emission interval b/a is whole exactly when a, the units per tick,
-- is 1: core/compile.go divides a and b by their greatest common divisor.
-- So a is compared as the string it is, and the loop's units are ticks
-- (debt = wait, ceildiv(x, a) = x), as is tick when it is 1 (a number
-- made from a string costs Redis a strtod, about 650 instructions).
if lone then
  local p = ARGV[off + 7]
  if (p == '-2' or p == '-1') and ARGV[off + 4] == '1' then
    local tick = 1
    if ARGV[off + 3] ~= '1' then
      tick = ARGV[off + 3] + 0
    end
    local event, cap, cell = ARGV[off + 5] + 0, ARGV[off + 6] + 0, ARGV[off + 8] + 0
    local now = (now_us - now_us % tick) / tick -- idiv(now_us, tick)
    local shapes = p == '-1'
    while d <= count do
      local n = unit or ARGV[base + d - 1] + 0
      local consume = n > 0
      if not consume then
        n = -n
      end
      local key = KEYS[d]
      local debt, wait = 0, 0 -- in units; in ticks, until untouched
      local was = nil
      local v = pcall_redis('GET', key)
      if v then
        if type(v) == 'table' then
          failed = v
          break
        end
        was = tonumber(v)
        if not was or was >= 4503599627370496 or was % 1 ~= 0 then
          break
        end
        if was > now then
          wait = was - now
          debt = wait
          if debt > cap then
            break
          end
        end
      end
      local need = n * event
      local avail = cap - debt
      avail = (avail - avail % event) / event -- idiv(cap - debt, event)
      local h, reset, extra
      if debt + need > cap then
        local retry = debt + need - cap -- ceildiv(debt + need - cap, a)
        h, reset, extra = avail * 4, wait * tick, retry * tick
      else
        extra = 0
        if shapes then
          extra = wait * tick -- the delay
        end
        if consume then
          local whole = debt + need
          local tat = now + whole
          local end_ = tat - tat % cell + cell -- cell_ttl(was, tat, now, cell)
          local e
          if was and was - was % cell + cell == end_ then
            if pcall_redis('INCRBY', key, format('%d', tat - was)) ~= tat then
              e = pcall_redis('SET', key, format('%d', tat), 'KEEPTTL') -- (see prelude.lua)
            end
          else
            local us = (end_ - now) * tick -- ttl_ms(end_ - now, tick): end_ > now
            local r = us % 1000
            if r ~= 0 then
              us = us - r + 1000
            end
            e = pcall_redis('SET', key, format('%d', tat), 'PX', format('%d', us / 1000))
          end
          if e and e.err then
            failed = e
            break
          end
          avail, wait = avail - n, whole
        end
        h, reset = avail * 4 + 2, wait * tick
      end
      if extra ~= 0 then
        replies[top + 1], replies[top + 2], replies[top + 3] = h + 1, reset, extra
        top = top + 3
      else
        replies[top + 1], replies[top + 2] = h, reset
        top = top + 2
      end
      d = d + 1
    end
    if d > count then
      return replies
    end
  end
end
