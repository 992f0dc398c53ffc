-- sliding_window_log.lua: SlidingWindowLog. A sorted set with one member per
-- admitted request, scored by its time, whatever its cost: exact for every
-- trailing window of `period` ticks (microseconds: the log never counts in
-- milliseconds, see core/compile.go). Memory is O(requests) per key: one
-- member for each request of the window, however many events it carries.
--
-- KEYS: the rule's key, a sorted set; score the request's time, member its
-- number: 5×10^15 plus the sum of the costs of every request the key has
-- admitted, up to and including it. Numbers stay below 9×10^15 (see
-- below), so every name has 16 digits and members of one score sort by
-- number, as Redis sorts them by name. (The offset, rather than leading
-- zeros, keeps every name a decimal integer as every Lua reads it, and as
-- Redis stores it.)
-- Params: a = rate (events per trailing period), b = period (ticks), c, d
-- unused.
-- Returns the common shape (prelude.lua). A request at time s counts while
-- now < s + period.
--
-- Numbers grow with time and with rank: a request is scored now, or at the
-- newest member's time when the clock stepped back behind it (it then
-- counts until that member leaves: the step gives nothing back, and the
-- window still ends at the newest member, so that no member that left it
-- comes back). So the events in the window are the newest member's number
-- less that of the newest member gone from the window (5×10^15 with none):
-- two reads, whatever the window holds. The set keeps that member, the
-- boundary, and every member older than it is removed (see below). RetryAfter, the time until
-- enough weight has left, is the time of the first member of the window
-- whose number, less the boundary's, reaches the excess: the oldest
-- member, or a binary search by rank (each probe O(log N)). An admitted
-- request writes one member: O(log N), whatever its cost.
--
-- Numbers stay below 9×10^15 (exact in a double, below 2^53): when one
-- would reach it (after 4×10^15 events, once in a key's life at most
-- rates) the window's members are numbered afresh, from 5×10^15 at the
-- boundary, which then leaves the set: a write of every member of the
-- window, once in 4×10^15 events.
--
-- As the meters' (see cell_ttl), the key's expiry is the end of a cell:
-- the period-long cell, aligned to the Unix epoch, that holds the instant
-- its newest request leaves the window. A write whose newest request
-- leaves in the same cell as the one before it keeps that expiry, and also
-- leaves the members gone from the window in the set: both are done
-- (PEXPIRE, ZREMRANGEBYSCORE) once a cell, at its first write, instead of
-- at every write. The price: a key lives up to a period longer than its
-- requests (its TTL is at most twice the period), and the set holds up to
-- a period's requests more than the window. No decision counts them: the
-- count is by number. (A key written by an earlier build, with a member
-- per event, is never read as one of these: SlidingWindowLog hashes its
-- state's form into its fingerprint. One whose TTL was removed from
-- outside gets one at its first write in another cell. A set whose newest
-- member lies ahead of now is read as after a clock step back only while
-- its TTL covers that member's leaving, as every write here makes it;
-- without, it was not written here: it is no state, and replaced by the
-- next admitted request's.)

-- log_number returns the number a member's name holds, or nil for a name
-- never written here (not a whole number from 5×10^15 to below 9×10^15:
-- "abc", "1", "-5", written from outside), which makes the set no state.
-- (tonumber, not x + 0, which raises on "abc": a call into C, only for
-- the names a decision reads, two when it admits.)
local function log_number(name)
  local x = tonumber(name)
  if x and x >= 5000000000000000 and x < 9000000000000000 and x % 1 == 0 then
    return x
  end
  return nil
end

local function sliding_window_log(key, now, rate, period, _, n, tick)
  local newest = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  local total, latest = 5000000000000000, -1 -- the newest member's number and time
  -- foreign: the set was not written here, as each step below may find;
  -- it is no state, decided as an empty log and replaced when admitted
  local foreign = false
  if newest[1] then
    total, latest = log_number(newest[1]), newest[2] + 0 -- a score, always a number (see head.lua on tonumber)
    -- a newest member ahead, as after a clock step back, but with no TTL
    -- to cover it as every write here gives (see ahead_alive)
    foreign = not total or latest > now and not ahead_alive(key, latest + period, tick)
  end
  -- members scored <= from have left the window; when the clock stepped
  -- back behind the newest member, the window still ends there
  local from = now - period
  if not foreign and latest > now then
    from = latest - period
  end
  -- base: the boundary's number; gone: its name (nil with no boundary)
  local base, gone = 5000000000000000, nil
  local used, reset_before = 0, 0
  if not foreign and latest > from then
    local b = call('ZREVRANGEBYSCORE', key, int(from), '-inf', 'LIMIT', '0', '1')[1]
    if b then
      base, gone = log_number(b), b
    end
    -- (a boundary's number is below the newest's: numbers grow with time)
    foreign = not (base and base < total)
    if not foreign then
      used = total - base
      reset_before = latest + period - now
    end
  elseif not foreign and newest[1] then
    base, gone = total, newest[1]
  end
  if not foreign and used + n > rate then
    -- the first member of the window whose number, less base, reaches need
    local need = used + n - rate
    local e = call('ZRANGEBYSCORE', key, '(' .. int(from), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
    local at, x = e[2], log_number(e[1])
    if x and x - base < need then
      -- e fails; the newest member (rank hi) holds used >= need
      local lo = call('ZCOUNT', key, '-inf', int(from)) + 1
      local hi = call('ZCARD', key) - 1
      at = newest[2]
      while x and lo < hi do
        local mid = idiv(lo + hi, 2)
        local m = call('ZRANGE', key, int(mid), int(mid), 'WITHSCORES')
        x = log_number(m[1])
        if x and x - base >= need then
          hi, at = mid, m[2]
        else
          lo = mid + 1
        end
      end
    end
    if x then
      return false, rate - used, at + period - now, reset_before, 0, 0, nil
    end
    foreign = true -- a member never written here
  end
  -- admitted; numbers reaching 9×10^15: the window's members, to number
  -- afresh (see the write below), read and checked before the reply is
  -- made (and before anything is written)
  local rows
  if not foreign and total + n >= 9000000000000000 then
    rows = call('ZRANGEBYSCORE', key, '(' .. int(from), '+inf', 'WITHSCORES')
    for i = 1, #rows, 2 do
      if not log_number(rows[i]) then
        foreign = true -- a member never written here
        break
      end
    end
  end
  if foreign then -- no state: decided as an empty log
    total, latest, base, gone, used, reset_before, from = 5000000000000000, -1, 5000000000000000, nil, 0, 0, now - period
  end
  local reset_after = period
  if reset_before > period then
    reset_after = reset_before
  end
  -- the instant the newest request leaves, now and as of the last write
  -- (when the window holds its request)
  local was
  if latest > from then
    was = latest + period
  end
  local keep, ttl = cell_ttl(was, now + reset_after, now, period)
  return true, rate - used, 0, reset_before, reset_after, 0, function()
    local at = now
    if latest > now then
      at = latest -- the clock stepped back: see the top of this file
    end
    local number = total + n
    if foreign then
      call('DEL', key)
    elseif number >= 9000000000000000 then -- number the window afresh (rows)
      call('DEL', key)
      -- ZADD in chunks keeps unpack below Lua's stack limit
      local i = 1
      while i <= #rows do
        local args = {}
        local j = 0
        while i <= #rows and j < 200 do
          args[j + 1] = rows[i + 1]
          args[j + 2] = int(rows[i] - base + 5000000000000000)
          i = i + 2
          j = j + 2
        end
        call('ZADD', key, unpack(args))
      end
      number, keep = used + n + 5000000000000000, false
    elseif gone and not keep then
      call('ZREMRANGEBYSCORE', key, '-inf', '(' .. call('ZSCORE', key, gone))
    end
    call('ZADD', key, int(at), int(number))
    if not keep then
      call('PEXPIRE', key, ttl_ms(ttl, tick))
    end
  end
end
