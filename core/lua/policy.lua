-- policy.lua: decides a batch of requests of one policy, each all or
-- nothing, in one script call.
--
-- KEYS: for each request, one key per rule; request d's keys are
--   KEYS[(d-1)*R + 1 .. d*R], all with the same hash tag (one cluster slot).
--   On Redis Cluster the requests of one call may lie in several slots of
--   one master: the call then declares no keys and sends them all at the
--   head of ARGV (ARGV[1] = how many, then the keys), under the
--   allow-cross-slot-keys flag, so that Redis checks each request's keys
--   where it reads them, never redirecting the whole call. The client puts a line
--   before head.lua that makes KEYS the keys of every request either way,
--   and off the number of ARGV values before R (0, or 1 + that count);
--   see core/script.go.
-- ARGV[off+1]: R, the number of rules.
-- ARGV[off+2 .. off+1+7R]: seven per rule: algorithm code (its index in
--   algorithms, which core/algorithms.go generates before this file), tick
--   (microseconds), then the algorithm's parameters a, b, c, d, e.
-- ARGV[off+2+7R ..]: one per request: its cost n to consume it (AllowN), or -n
--   to only look (Peek passes -1); or none at all when every request of the
--   call consumes 1 (Allow, the common case: one argument less per request
--   for Redis to read and hand to Lua). The requests are then counted by
--   their keys.
-- Returns one flat array of integers, the requests' answers one after
--   another: for each request, per rule, two or three integers:
--   remaining × 4 + 2 if the rule admits + 1 if a third integer follows,
--   then reset_after_us, then delay_us (admitted) or retry_after_us
--   (denied). A policy of one rule leaves the third out when it is 0 (see
--   run); one of several rules always sends it (see decide). The request
--   is admitted when every rule admits.
--   When a request failed (a key of the wrong type; on a cluster, a key
--   of a slot this master no longer serves), its answer is its error
--   message in integers instead (see put_error), which begins with a
--   negative integer. One request's error never fails another, and a
--   failed request has written nothing: each reads all its keys before it
--   writes any (a cluster checks where a key lives at its first access);
--   but the INCRBY of fw_take, swc_take or a window's lone loop stays when
--   the SET after it fails (see failed in head.lua).
--   (Flat rather than an array per request: no table per request in the
--   script, none in the client; integers only, so the client reads them
--   into one []int64 without boxing each; as few as the answer needs, since
--   Redis spends about a tenth of a microsecond on each.)
--   This packed form is written in five places, the three lone loops
--   (meter_lone.lua, fixed_window_lone.lua, sliding_window_counter_lone.lua),
--   run's one-rule loop and decide below, and read in one, parseReply in
--   core/codec.go: a change to the form is a change to all of them.
--
-- Time comes from Redis (TIME), never from the caller, once per call: the
-- requests of a batch are decided in order, at the same instant, as if one
-- after the other. For each request: when a rule denies, nothing is
-- written and each rule reports its state before the request; when all
-- admit and it consumes, every rule consumes and reports its state after.
-- Sending many requests in one call spares Redis the cost of a script call
-- per request: the decisions are the same as if sent one by one.
-- The call starts in head.lua (the time, the requests, the answers), and
-- a lone loop (meter_lone.lua, fixed_window_lone.lua,
-- sliding_window_counter_lone.lua) may have decided some or all of its
-- requests before this file runs: it goes on from request d.
-- algorithms, the functions by code, is not defined here: the client puts
-- it just before this file, generated from its table of algorithms
-- (core/algorithms.go), so that the codes are listed once.

local rules = {}
for i = 1, R do
  local j = off + 2 + (i - 1) * 7
  local tick = ARGV[j + 1] + 0
  rules[i] = {
    algorithms[ARGV[j] + 0], tick, idiv(now_us, tick),
    ARGV[j + 2] + 0, ARGV[j + 3] + 0, ARGV[j + 4] + 0, ARGV[j + 5] + 0,
    ARGV[j + 6] + 0,
  }
end

-- Each call makes anew every function and table the script defines, a
-- cost that grows with each local a closure captures. So what only a
-- policy of several rules needs (store, decide and their tables) is made
-- only for one, and a failed request's answer is written where it fails.
local run -- decides requests d .. count
if R > 1 then
  -- store carries out a rule's write (see prelude.lua): a new value with
  -- its TTL (of ttl ticks) in one command, or with the TTL the key already
  -- has (keep), or a write function.
  local function store(key, write, keep, ttl, tick)
    if keep then
      if keep == true then
        call('SET', key, write, 'KEEPTTL')
      elseif pcall_redis('INCRBY', key, keep) ~= write then
        call('SET', key, int(write), 'KEEPTTL') -- (see prelude.lua)
      end
    elseif type(write) == 'string' then
      call('SET', key, write, 'PX', ttl_ms(ttl, tick))
    else
      write()
    end
  end

  -- per rule, the pending write of the request being decided; reused
  local pending_write, pending_after, pending_reset, pending_keep, pending_ttl = {}, {}, {}, {}, {}

  -- A policy of several rules may have one rule taken as a lone rule's
  -- request is (see run): the last of its FixedWindow and
  -- SlidingWindowCounter rules in the integer form, take_at. decide
  -- evaluates it last, once every other rule admits, with fw_take or
  -- swc_take, which write first and give back what is not admissible: the
  -- request then costs that rule one command instead of a GET and an INCRBY.
  -- When it does not admit, nothing has been written by any rule. order
  -- lists the rules in the order decide evaluates them.
  -- (A policy of one rule is decided by run, without decide.)
  local take_at, take_fn
  local order = {}
  for i = 1, R do
    local r = rules[i]
    if r[6] > 0 and r[1] == fixed_window then
      take_at, take_fn = i, fw_take
    elseif r[6] > 0 and r[1] == sliding_window_counter then
      take_at, take_fn = i, swc_take
    end
  end
  for i = 1, R do
    if i ~= take_at then
      order[#order + 1] = i
    end
  end
  order[R] = take_at or R

  -- decide writes request d's answer straight into replies, after top, three
  -- integers per rule (the third even when 0), and moves top past it only
  -- once all its work is done.
  local function decide(d, consume, n)
    local out = top
    local all = true
    local keys = (d - 1) * R -- its keys follow KEYS[keys]
    for j = 1, R do
      local i = order[j]
      local r = rules[i]
      local tick = r[2]
      local k = out + 3 * i - 2
      local taken -- true or false when take_fn decided, nil when it did not
      if i == take_at and all and consume then
        local remaining, reset, retry
        taken, remaining, reset, retry = take_fn(KEYS[keys + i], r[3], r[4], r[5], r[6], n, tick, r[7])
        if taken then
          replies[k], replies[k + 1], replies[k + 2] = remaining * 4 + 3, reset * tick, 0
          pending_write[i] = false -- written
        elseif taken == false then
          if remaining < 0 then
            remaining = 0 -- never, as for one rule (see run)
          end
          replies[k], replies[k + 1], replies[k + 2] = remaining * 4 + 1, reset * tick, retry * tick
          all = false
        end
      end
      if taken == nil then
        local ok, avail, retry, reset_before, reset_after, delay, write, after, keep, ttl =
          r[1](KEYS[keys + i], r[3], r[4], r[5], r[6], n, tick, r[7], r[8])
        if avail < 0 then
          avail = 0 -- never, as for one rule (see run)
        end
        if after == nil then
          after = avail - n
        end
        if ok then
          replies[k], replies[k + 2] = avail * 4 + 3, delay * tick
        else
          replies[k], replies[k + 2] = avail * 4 + 1, retry * tick
          all = false
        end
        replies[k + 1] = reset_before * tick
        pending_write[i], pending_after[i], pending_reset[i], pending_keep[i], pending_ttl[i] = write, after, reset_after, keep, ttl or reset_after
      end
    end
    if all and consume then
      for i = 1, R do
        if pending_write[i] ~= false then
          local k = out + 3 * i - 2
          local tick = rules[i][2]
          store(KEYS[keys + i], pending_write[i], pending_keep[i], pending_ttl[i], tick)
          replies[k], replies[k + 1] = pending_after[i] * 4 + 3, pending_reset[i] * tick
        end
      end
    elseif not all then
      for i = 1, R do
        local k = out + 3 * i - 2
        if replies[k] % 4 == 3 then
          replies[k + 2] = 0 -- admitted by this rule, not by all: no delay
        end
      end
    end
    top = out + 3 * R
  end

  run = function()
    while d <= count do
      local n = unit or ARGV[base + d - 1] + 0
      if n > 0 then
        decide(d, true, n)
      else
        decide(d, false, -n)
      end
      d = d + 1
    end
  end
else
  -- A policy of one rule, the common case: decide's work for one rule and
  -- store's written out in the loop, a Lua call or two less per request
  -- (each costs Redis several hundred instructions, paid for every
  -- request of the commonest calls). A change to store's write is a
  -- change to this one, and to the lone loops' (the *_lone.lua files),
  -- which decide most requests of a lone meter, FixedWindow or
  -- SlidingWindowCounter rule before this loop runs. It appends two or
  -- three integers per request (see the top of this file), leaving the
  -- third out when it is 0. No algorithm lets its state pass its
  -- capacity, so remaining is never negative; were it ever, it is sent as
  -- 0 rather than as a negative integer, which marks an error.
  --
  -- A request that consumes, of a rule that uses the integer form of
  -- FixedWindow or SlidingWindowCounter (its third parameter is not 0), is
  -- taken by fw_take or swc_take first, with one command when admitted
  -- (see fixed_window.lua); one whose key does not hold an integer goes
  -- the common way.
  run = function()
    local r = rules[1]
    local alg, tick, now, a, b, c, p, e = r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]
    local take
    if alg == fixed_window and c > 0 then
      take = fw_take
    elseif alg == sliding_window_counter and c > 0 then
      take = swc_take
    end
    local keys = KEYS -- an upvalue here: a local reads faster
    while d <= count do
      local n = unit or ARGV[base + d - 1] + 0
      local consume = n > 0
      if not consume then
        n = -n
      end
      local key = keys[d]
      local h, reset, extra -- the answer, once alg gave it
      local taken -- true or false when take decided, nil when it did not
      if take and consume then
        local remaining, reset, retry
        taken, remaining, reset, retry = take(key, now, a, b, c, n, tick, p)
        if taken then
          replies[top + 1], replies[top + 2] = remaining * 4 + 2, reset * tick
          top = top + 2
        elseif taken == false then
          if remaining < 0 then
            remaining = 0 -- never, as below
          end
          replies[top + 1], replies[top + 2], replies[top + 3] = remaining * 4 + 1, reset * tick, retry * tick
          top = top + 3
        end
      end
      if h == nil and taken == nil then
        local ok, avail, retry, reset_before, reset_after, delay, write, after, keep, ttl =
          alg(key, now, a, b, c, n, tick, p, e)
        if not ok then
          h, reset, extra = avail * 4, reset_before * tick, retry * tick
        elseif not consume then
          h, reset, extra = avail * 4 + 2, reset_before * tick, delay * tick
        else
          if keep then
            if keep == true then
              call('SET', key, write, 'KEEPTTL')
            elseif pcall_redis('INCRBY', key, keep) ~= write then
              call('SET', key, int(write), 'KEEPTTL') -- (see prelude.lua)
            end
          elseif type(write) == 'string' then
            call('SET', key, write, 'PX', ttl_ms(ttl or reset_after, tick))
          else
            write()
          end
          if after == nil then
            after = avail - n
          end
          h, reset, extra = after * 4 + 2, reset_after * tick, delay * tick
        end
        if h < 0 then
          h = h % 4 -- remaining 0, the flags kept
        end
      end
      if h then
        if extra ~= 0 then
          replies[top + 1], replies[top + 2], replies[top + 3] = h + 1, reset, extra
          top = top + 3
        else
          replies[top + 1], replies[top + 2] = h, reset
          top = top + 2
        end
      end
      d = d + 1
    end
  end
end

-- Requests are decided in one protected loop; when one fails (a key of
-- the wrong type), its error becomes its reply and the loop resumes after
-- it. One pcall per script call, not one per request.
while d <= count do
  local ok, err = false, failed
  if not failed then
    ok, err = pcall(run)
  end
  failed = nil
  if not ok then
    -- a request moves top past its answer only once all its work is done,
    -- so the failed one's partial answer lies beyond top: it is cleared
    -- (the reply ends at the first nil) and its error written in its place
    if type(err) == 'table' then
      err = err.err
    end
    err = tostring(err)
    -- A replica refuses every write (READONLY): no request of this call
    -- has written anything, so the call is refused whole, as Redis refuses
    -- a call it does not run, and the client sends it again after a pause
    -- (a failover may have just made this server a replica). Redis 6 words
    -- the refusal "@user_script: N: -READONLY …".
    local readonly = match(err, '^READONLY .*') or match(err, '^@user_script: ?%d+: %-(READONLY .*)')
    if readonly then
      return redis.error_reply(readonly)
    end
    for k = top + 1, top + 3 * R do
      replies[k] = nil
    end
    -- put_error appends a failed request's answer: -(length + 1) of its
    -- error message (at most 600 bytes), then the message's bytes six to
    -- an integer (48 bits, exact in a double), the last padded with zeros.
    -- An answer never begins with a negative integer otherwise. (Made
    -- here, when a request fails, rather than at every call.)
    local function put_error(msg)
      local len = #msg
      if len > 600 then
        msg, len = string.sub(msg, 1, 600), 600
      end
      top = top + 1
      replies[top] = -(len + 1)
      for i = 1, len, 6 do
        local x = 0
        for j = i, i + 5 do
          x = x * 256 + (string.byte(msg, j) or 0)
        end
        top = top + 1
        replies[top] = x
      end
    end
    put_error(err)
    d = d + 1
  end
end
return replies
