#!lua flags=no-writes
--[[
status.lua: reads, at one instant of the store's clock, everything `valve status` shows about
one valve id: the shared pause, the leases, the last fencing number, the recorded rule set,
each given rule's state, the fleet window (wrapFetch) and the given lines of turns. Writes
nothing (flags=no-writes): it runs under OOM and changes no TTL. The command checks each value
as the store's scripts do and computes units left and waits from the raw state with the
stores' own arithmetic.

KEYS[1]        <prefix>:{<id>}:pause   string, pausedUntil (epoch ms, 3 decimals)
KEYS[2]        <prefix>:{<id>}:leases  sorted set, lease token -> expiresAt (epoch ms)
KEYS[3]        <prefix>:{<id>}:fence   string, the last fencing number
KEYS[4]        <prefix>:{<id>}:rules   string, the recorded rule set "<until µs>:<digests>"
KEYS[5]        <prefix>:{<id>}:pause-by  string, what wrote the pause
KEYS[6]        <prefix>:{<id>}:window  string, the fleet window "seq,reset,left,..." (window.lua)
KEYS[6+r]      <prefix>:{<id>}:r:<digest of rule r>, r = 1..m (m = #ARGV)
KEYS[6+m+l]    <prefix>:{<id>}:line:<digest>, l = 1..(#KEYS - 6 - m): lines of turns
ARGV[r]        rule r's kind: "g" (GCRA) or "w" (fixed window), read with GET; "s" (sliding
               window), read with LRANGE

Reply: { nowUs, pause, fence, record, { token_1, expiresAt_1, ... }, { state_1, ..., state_m },
         pauseBy, window, { line_1, ... } }
  pause, fence, record, pauseBy, window, a line, and a GET rule's state: the key's value, ""
  when missing, "!empty" when the key holds an empty string (the scripts refuse it)
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
  if v == '' then
    return '!empty'
  end
  return v or ''
end

local leases = redis.pcall('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
if leases.err then
  leases = '!type'
end

local m = #ARGV
local states = {}
for r = 1, m do
  local key = KEYS[6 + r]
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

local lines = {}
for l = 1, #KEYS - 6 - m do
  lines[l] = get(KEYS[6 + m + l])
end

return { string.format('%d', now), get(KEYS[1]), get(KEYS[3]), get(KEYS[4]), leases, states, get(KEYS[5]),
  get(KEYS[6]), lines }
