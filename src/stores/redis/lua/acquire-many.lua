#!lua
--[[
acquire-many.lua: several acquire.lua calls in one script call, each for its own valve id
(a valve group's keys, thousands of them with a job or two each: batching per id cannot help,
batching across ids does). Standalone servers only: the ids' keys are in different hash slots.
Each request is exactly one acquire.lua call, run one after the other in the order given,
atomically as a whole; the server's TIME is read once for all of them. Only requests whose
jobs all have the same cost and that convert nothing come here. What many requests share (the
rules, the lease settings, the rule-set record: a valve group's keys have the same) is sent
once per call, as a "shape".

KEYS         every request's acquire.lua KEYS (5 + m of them), one request after the other
ARGV[1]      "" (use Redis TIME), or the time in µs (test-only virtual clock): acquire.lua's ARGV[1]
ARGV[2]      k, the number of requests
ARGV[3]      s, the number of shapes
then         s shapes, each its length L and then L strings: m, lease limit, lease ttl, the
             3m rule arguments, the record argument and its TTL (acquire.lua's ARGV[3..5],
             ARGV[7..6+3m] and ARGV[t..t+1])
then         k requests, 5 strings each: its shape (1..s), n, the lease token nonce, the cost of
             every job, the ticket (acquire.lua's ARGV[2], ARGV[6], ARGV[7+3m] and ARGV[t+2])

Flags (#!lua, no allow-oom): as acquire.lua.
Reply: { reply_1, ..., reply_k }: each request's acquire.lua reply, or its error reply (a
request whose state is corrupt, or that fails, fails alone: the others are answered).
]]

if redis.replicate_commands then
  redis.replicate_commands()
end

-- @include acquire-one

local clock = ARGV[1]
local k = tonumber(ARGV[2])
local s = tonumber(ARGV[3])
local time_us = nil
if clock == '' then
  local t = redis.call('TIME')
  time_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local shapes = {}
local a = 4
for i = 1, s do
  local len = tonumber(ARGV[a])
  local shape = {}
  for j = 1, len do
    shape[j] = ARGV[a + j]
  end
  shapes[i] = shape
  a = a + 1 + len
end
local out = {}
local kf = 0
for i = 1, k do
  local shape = shapes[tonumber(ARGV[a])]
  local m = tonumber(shape[1])
  local nk = 5 + m
  local keys = {}
  for j = 1, nk do
    keys[j] = KEYS[kf + j]
  end
  kf = kf + nk
  -- acquire.lua's ARGV, from the shape and the request's own four strings.
  local argv = { clock, ARGV[a + 1], shape[1], shape[2], shape[3], ARGV[a + 2] }
  local r3 = 3 * m
  for j = 1, r3 do
    argv[6 + j] = shape[3 + j]
  end
  argv[7 + r3] = ARGV[a + 3]
  argv[8 + r3] = shape[4 + r3]
  argv[9 + r3] = shape[5 + r3]
  argv[10 + r3] = ARGV[a + 4]
  argv[11 + r3] = ''
  a = a + 5
  local ok, reply = pcall(acquire_one, keys, argv, time_us)
  if not ok then
    if type(reply) == 'table' and reply.err then
      out[i] = reply
    else
      out[i] = redis.error_reply(tostring(reply))
    end
  else
    out[i] = reply
  end
end
return out
