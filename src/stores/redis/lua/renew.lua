#!lua flags=allow-oom
--[[
renew.lua: extends each given global-concurrency lease that is still held and unexpired to
now + ttl. Never resurrects: an expired lease is removed, a missing one stays missing.

KEYS[1]  <prefix>:{<id>}:leases  sorted set, lease token -> expiresAt (epoch ms)
KEYS[2]  <prefix>:{<id>}:fence   string, the last fencing number (its TTL follows the leases)
ARGV[1]  "" (use Redis TIME), or the time in µs (test-only virtual clock)
ARGV[2]  the new ttl in µs
ARGV[3..] the lease tokens

Flags: allow-oom, so that a full server (maxmemory, noeviction) still renews the leases of running
jobs (refused, they would all be lost with LEASE_LOST although valid). It cannot grow memory: it
only updates members that exist (ZADD XX), removes expired ones (ZREM), and moves the expiry of
keys that exist and already carry one (PEXPIRE; the fence key only when it EXISTS); it creates no
key and no member.
Errors: "VALVE_CORRUPT_STATE <key> ..." when the leases key is no sorted set or a lease expires
further ahead than any ttl.

Reply: { nowUs, expiresAtUs, held_1, ..., held_k }, held_i = 1 when token i is still held
(and now expires at expiresAtUs), else 0
]]

-- @include common

local clock = ARGV[1]
local testing = test_mode(clock)
local now = now_us(clock)
local expires = now + tonumber(ARGV[2])
local expires_ms = us_to_ms_str(expires)

local reply = { now, expires }
local any = false
for i = 3, #ARGV do
  local token = ARGV[i]
  local score = redis.pcall('ZSCORE', KEYS[1], token)
  if type(score) == 'table' then
    return corrupt(KEYS[1], 'a value of another type', 'a sorted set')
  end
  if score and not stored_ms_to_us(score, now) then
    return corrupt(KEYS[1], token .. ' ' .. score, 'lease expiries in epoch ms at most 365 days ahead')
  end
  local held = 0
  if score then
    if ms_str_to_us(score) > now then
      redis.call('ZADD', KEYS[1], 'XX', expires_ms, token)
      held = 1
      any = true
    else
      redis.call('ZREM', KEYS[1], token)
    end
  end
  reply[#reply + 1] = held
end
if any then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local latest = tonumber(last[2])
  if not latest or latest * 1000 > now + AHEAD then
    return corrupt(KEYS[1], last[1] .. ' ' .. last[2], 'lease expiries in epoch ms at most 365 days ahead')
  end
  local ttl = ttl_ms(ms_str_to_us(last[2]) - now, testing)
  redis.call('PEXPIRE', KEYS[1], ttl)
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
end
return reply
