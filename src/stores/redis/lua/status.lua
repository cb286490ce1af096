#!lua flags=no-writes
--[[
status.lua: reads, at one instant of the store's clock, everything `valve status` shows about
one valve id: the shared pause, the leases, the last fencing number, the recorded rule set and
each given rule's state. Writes nothing (flags=no-writes): it runs under OOM and changes no TTL.
The command computes units left and waits from the raw state with the stores' own arithmetic.

KEYS[1]      <prefix>:{<id>}:pause   string, pausedUntil (epoch ms, 3 decimals)
KEYS[2]      <prefix>:{<id>}:leases  sorted set, lease token -> expiresAt (epoch ms)
KEYS[3]      <prefix>:{<id>}:fence   string, the last fencing number
KEYS[4]      <prefix>:{<id>}:rules   string, the recorded rule set "<until µs>:<digests>"
KEYS[5]      <prefix>:{<id>}:pause-by  string, what wrote the pause
KEYS[5+r]    <prefix>:{<id>}:r:<digest of rule r>, r = 1..m
ARGV[r]      rule r's kind: "g" (GCRA) or "w" (fixed window), read with GET; "s" (sliding
             window), read with LRANGE

Reply: { nowUs, pause, fence, record, { token_1, expiresAt_1, ... }, { state_1, ..., state_m }, pauseBy }
  pause, fence, record, pauseBy, and a GET rule's state: the key's value, "" when missing
  a sliding window's state: the whole list (sum, t1, c1, t2, c2, ...), empty when missing
  "!type" in place of any value whose key holds another type (the command reports it)
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function get(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return '!type'
  end
  return v or ''
end

local leases = redis.pcall('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
if leases.err then
  leases = '!type'
end

local states = {}
for r = 1, #ARGV do
  local key = KEYS[5 + r]
  if ARGV[r] == 's' then
    local list = redis.pcall('LRANGE', key, 0, -1)
    if list.err then
      list = '!type'
    end
    states[r] = list
  else
    states[r] = get(key)
  end
end

return { string.format('%d', now), get(KEYS[1]), get(KEYS[3]), get(KEYS[4]), leases, states, get(KEYS[5]) }
