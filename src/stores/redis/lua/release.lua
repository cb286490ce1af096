#!lua flags=allow-oom
--[[
release.lua: removes the given global-concurrency leases (only those tokens) and, when one was
held, publishes "release" on the id's wake channel so waiting processes recheck at once.

KEYS[1]  <prefix>:{<id>}:leases  sorted set, lease token -> expiresAt (epoch ms)
ARGV[1]  the wake channel, <prefix>:{<id>}:wake
ARGV[2]  publish mode: "p" PUBLISH, "s" SPUBLISH, "" none
ARGV[3..] the lease tokens

Flags: allow-oom, it only deletes (which frees memory), so it runs even when Redis is full.
Errors: "VALVE_CORRUPT_STATE <key> ..." when the leases key is no sorted set.

Reply: the number of leases removed
]]

-- @include common

local removed = 0
for i = 3, #ARGV do
  local n = redis.pcall('ZREM', KEYS[1], ARGV[i])
  if type(n) == 'table' then
    -- Only when the key is no sorted set; ZREM then wrote nothing.
    return corrupt(KEYS[1], 'a value of another type', 'a sorted set')
  end
  removed = removed + n
end
if removed > 0 then
  notify(ARGV[2], ARGV[1], 'release')
end
return removed
