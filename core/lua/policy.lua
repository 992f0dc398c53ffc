-- policy.lua: decides every rule of one key, all or nothing.
--
-- KEYS: one key per rule, all with the same hash tag (one cluster slot).
-- ARGV[1]: "1" to consume (AllowN), "0" to only look (Peek).
-- ARGV[2]: n, the cost (Peek passes 1).
-- ARGV[3..]: six per rule: algorithm code (1 fixed_window,
--   2 sliding_window_log, 3 sliding_window_counter, 4 leaky_bucket,
--   5 token_bucket, 6 gcra), tick (microseconds), then the algorithm's
--   parameters a, b, c, d.
-- Returns: { allowed (0|1), then per rule: allowed (0|1), remaining,
--   retry_after_us, reset_after_us, delay_us }.
--
-- Time comes from Redis (TIME), never from the caller. When a rule denies,
-- nothing is written: each rule reports its state before the request. When
-- all admit and ARGV[1] is "1", every rule consumes and reports its state
-- after.
if redis.replicate_commands then
  redis.replicate_commands() -- Redis < 5: allow TIME before writes
end
local algorithms = {
  fixed_window, sliding_window_log, sliding_window_counter,
  leaky_bucket, token_bucket, gcra,
}
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local consume = ARGV[1] == '1'
local n = tonumber(ARGV[2])

local out = { 1 }
local writes = {}
local all = true
for i = 1, #KEYS do
  local j = 3 + (i - 1) * 6
  local tick = tonumber(ARGV[j + 1])
  local ok, avail, retry, reset_before, reset_after, delay, write, after =
    algorithms[tonumber(ARGV[j])](KEYS[i], idiv(now_us, tick),
      tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4]), n, tick,
      tonumber(ARGV[j + 5]))
  if after == nil then
    after = avail - n
  end
  local k = 2 + (i - 1) * 5
  if ok then
    out[k] = 1
  else
    out[k] = 0
    all = false
  end
  out[k + 1] = avail
  out[k + 2] = retry * tick
  out[k + 3] = reset_before * tick
  out[k + 4] = delay * tick
  writes[i] = { write, after, reset_after * tick }
end
if all then
  if consume then
    for i = 1, #KEYS do
      local k = 2 + (i - 1) * 5
      writes[i][1]()
      out[k + 1] = writes[i][2]
      out[k + 3] = writes[i][3]
    end
  end
else
  out[1] = 0
  for i = 1, #KEYS do
    out[2 + (i - 1) * 5 + 4] = 0 -- nothing admitted, nothing to wait for
  end
end
return out
