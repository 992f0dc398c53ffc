-- policy.lua: decides a batch of requests of one policy, each all or
-- nothing, in one script call.
--
-- KEYS: for each request, one key per rule; request d's keys are
--   KEYS[(d-1)*R + 1 .. d*R], all with the same hash tag (one cluster slot).
-- ARGV[1]: R, the number of rules.
-- ARGV[2 .. 1+6R]: six per rule: algorithm code (1 fixed_window,
--   2 sliding_window_log, 3 sliding_window_counter, 4 leaky_bucket,
--   5 token_bucket, 6 gcra), tick (microseconds), then the algorithm's
--   parameters a, b, c, d.
-- ARGV[2+6R ..]: one per request: its cost n to consume it (AllowN), or -n
--   to only look (Peek passes -1); or none at all when every request of the
--   call consumes 1 (Allow, the common case: one argument less per request
--   for Redis to read and hand to Lua). The requests are then counted by
--   their keys.
-- Returns one flat array of integers, the requests' answers one after
--   another: for each request, allowed (0|1), then per rule: allowed (0|1),
--   remaining, retry_after_us, reset_after_us, delay_us; or, when that
--   request failed (a key of the wrong type), its error message in
--   integers (see put_error). One request's error never fails another.
--   (Flat rather than an array per request: no table per request in the
--   script, none in the client; integers only, so the client reads them
--   into one []int64 without boxing each.)
--
-- Time comes from Redis (TIME), never from the caller, once per call: the
-- requests of a batch are decided in order, at the same instant, as if one
-- after the other. For each request: when a rule denies, nothing is
-- written and each rule reports its state before the request; when all
-- admit and it consumes, every rule consumes and reports its state after.
-- Sending many requests in one call spares Redis the cost of a script call
-- per request: the decisions are the same as if sent one by one.
if redis.replicate_commands then
  redis.replicate_commands() -- Redis < 5: allow TIME before writes
end
local algorithms = {
  fixed_window, sliding_window_log, sliding_window_counter,
  leaky_bucket, token_bucket, gcra,
}
local time = call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])

local R = tonumber(ARGV[1])
local rules = {}
for i = 1, R do
  local j = 2 + (i - 1) * 6
  local tick = tonumber(ARGV[j + 1])
  rules[i] = {
    algorithms[tonumber(ARGV[j])], tick, idiv(now_us, tick),
    tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4]), tonumber(ARGV[j + 5]),
  }
end

-- per rule, the pending write of the request being decided; reused
local pending_write, pending_after, pending_reset, pending_keep = {}, {}, {}, {}

-- the answers, flat; top is the index of the last one written
local replies, top = {}, 0

-- put appends the six values of a one-rule answer.
local function put(a, b, c, d, e, f)
  replies[top + 1], replies[top + 2], replies[top + 3] = a, b, c
  replies[top + 4], replies[top + 5], replies[top + 6] = d, e, f
  top = top + 6
end

-- put_error appends a failed request's answer: -(length + 1) of its error
-- message (at most 600 bytes), then the message's bytes six to an integer
-- (48 bits, exact in a double), the last padded with zeros. An answer never
-- begins with a negative integer otherwise.
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

-- store carries out a rule's write (see prelude.lua): a new value with
-- its TTL in one command, or with the TTL the key already has (keep), or a
-- write function.
local function store(key, write, keep, reset_after, tick)
  if keep then
    call('SET', key, write, 'KEEPTTL')
  elseif type(write) == 'string' then
    call('SET', key, write, 'PX', ttl_ms(reset_after, tick))
  else
    write()
  end
end

-- decide1 is decide for a policy of one rule, the common case.
local function decide1(d, consume, n)
  local r = rules[1]
  local tick = r[2]
  local ok, avail, retry, reset_before, reset_after, delay, write, after, keep =
    r[1](KEYS[d], r[3], r[4], r[5], r[6], n, tick, r[7])
  if not ok then
    return put(0, 0, avail, retry * tick, reset_before * tick, 0)
  end
  if not consume then
    return put(1, 1, avail, 0, reset_before * tick, delay * tick)
  end
  store(KEYS[d], write, keep, reset_after, tick)
  if after == nil then
    after = avail - n
  end
  put(1, 1, after, 0, reset_after * tick, delay * tick)
end

-- decide writes request d's answer straight into replies, after top, and
-- moves top past it only once all its work is done.
local function decide(d, consume, n)
  local out = top
  local all = true
  for i = 1, R do
    local r = rules[i]
    local tick = r[2]
    local ok, avail, retry, reset_before, reset_after, delay, write, after, keep =
      r[1](KEYS[(d - 1) * R + i], r[3], r[4], r[5], r[6], n, tick, r[7])
    if after == nil then
      after = avail - n
    end
    local k = out + 2 + (i - 1) * 5
    if ok then
      replies[k] = 1
    else
      replies[k] = 0
      all = false
    end
    replies[k + 1] = avail
    replies[k + 2] = retry * tick
    replies[k + 3] = reset_before * tick
    replies[k + 4] = delay * tick
    pending_write[i], pending_after[i], pending_reset[i], pending_keep[i] = write, after, reset_after, keep
  end
  if all then
    if consume then
      for i = 1, R do
        local k = out + 2 + (i - 1) * 5
        local tick = rules[i][2]
        store(KEYS[(d - 1) * R + i], pending_write[i], pending_keep[i], pending_reset[i], tick)
        replies[k + 1] = pending_after[i]
        replies[k + 3] = pending_reset[i] * tick
      end
    end
    replies[out + 1] = 1
  else
    replies[out + 1] = 0
    for i = 1, R do
      replies[out + 2 + (i - 1) * 5 + 4] = 0 -- nothing admitted, nothing to wait for
    end
  end
  top = out + 1 + 5 * R
end

local decide_request = decide
if R == 1 then
  decide_request = decide1
end

-- Requests are decided in one protected loop; when one fails (a key of
-- the wrong type), its error becomes its reply and the loop resumes after
-- it. One pcall per script call, not one per request.
local base = 2 + 6 * R
local count = #ARGV - base + 1
local unit = false -- 1 when every request consumes 1 and has no argument
if count == 0 then
  count = #KEYS / R
  unit = 1
end
local d = 1
local function run()
  while d <= count do
    local n = unit or tonumber(ARGV[base + d - 1])
    if n > 0 then
      decide_request(d, true, n)
    else
      decide_request(d, false, -n)
    end
    d = d + 1
  end
end
while d <= count do
  local ok, err = pcall(run)
  if not ok then
    -- a request moves top past its answer only once all its work is done,
    -- so the failed one's partial answer lies beyond top: it is cleared
    -- (the reply ends at the first nil) and its error written in its place
    if type(err) == 'table' then
      err = err.err
    end
    for k = top + 1, top + 1 + 5 * R do
      replies[k] = nil
    end
    put_error(tostring(err))
    d = d + 1
  end
end
return replies
