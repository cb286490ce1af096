#!lua
--[[
acquire-many.lua: several acquire.lua calls in one script call, each for its own valve id
(a valve group's keys, thousands of them with a job or two each: batching per id cannot help,
batching across ids does). Standalone servers only: the ids' keys are in different hash slots.
Each request is exactly one acquire.lua call, run one after the other in the order given,
atomically as a whole; the server's TIME is read once for all of them.

KEYS         every request's keys (acquire.lua's KEYS), one request after the other
ARGV[1]      k, the number of requests
ARGV[2..1+2k]  per request i: ARGV[2i] its number of keys, ARGV[2i+1] its number of arguments
then         every request's arguments (acquire.lua's ARGV), one request after the other

Flags (#!lua, no allow-oom): as acquire.lua.
Reply: { reply_1, ..., reply_k }: each request's acquire.lua reply, or its error reply (a
request whose state is corrupt, or that fails, fails alone: the others are answered).
]]

if redis.replicate_commands then
  redis.replicate_commands()
end

-- @include acquire-one

local k = tonumber(ARGV[1])
local t = redis.call('TIME')
local time_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
local kf, af = 0, 1 + 2 * k
for i = 1, k do
  local nk, na = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local keys, argv = {}, {}
  for j = 1, nk do
    keys[j] = KEYS[kf + j]
  end
  for j = 1, na do
    argv[j] = ARGV[af + j]
  end
  kf, af = kf + nk, af + na
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
