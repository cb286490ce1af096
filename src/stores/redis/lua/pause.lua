#!lua
--[[
pause.lua: extends the shared pause of one valve id to at least now + ms (never shortens it)
and, when it was extended, publishes "pause:<until ms>" on the id's wake channel and records
what paused in KEYS[2] (read by `valve status`; deleted when the extending call names nothing).

KEYS[1]  <prefix>:{<id>}:pause   string, pausedUntil (epoch ms, 3 decimals)
KEYS[2]  <prefix>:{<id>}:pause-by  string, what wrote the pause (same TTL as KEYS[1])
ARGV[1]  "" (use Redis TIME), or the time in µs (test-only virtual clock)
ARGV[2]  the pause's length in µs (integer, > 0)
ARGV[3]  the wake channel, <prefix>:{<id>}:wake
ARGV[4]  publish mode: "p" PUBLISH, "s" SPUBLISH, "" none
ARGV[5]  what paused, e.g. "retry-after (retry-after)"; "" (or absent) when unknown

Flags (#!lua, no allow-oom): refused whole under OOM (maxmemory, noeviction).
Errors: "VALVE_CORRUPT_STATE <key> ..." when the pause key holds what valve never writes.

Reply: { pausedUntilUs, nowUs }, the pause's end after this call (epoch µs) and the store's clock
]]

-- @include common

local clock = ARGV[1]
local testing = test_mode(clock)
local now = now_us(clock)
local wanted = now + tonumber(ARGV[2])

local current = 0
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' then
  return corrupt(KEYS[1], 'a value of another type', 'a string')
end
if raw then
  current = stored_ms_to_us(raw, now)
  if not current then
    return corrupt(KEYS[1], raw, 'a pause end in epoch ms at most 365 days ahead')
  end
end
if current >= wanted then
  return { current, now }
end
if wanted <= now then
  -- A zero-length pause records nothing.
  return { now, now }
end
local until_ms = us_to_ms_str(wanted)
local ttl = ttl_ms(wanted - now, testing)
redis.call('SET', KEYS[1], until_ms, 'PX', ttl)
if ARGV[5] and ARGV[5] ~= '' then
  redis.call('SET', KEYS[2], ARGV[5], 'PX', ttl)
else
  redis.call('DEL', KEYS[2])
end
notify(ARGV[4], ARGV[3], 'pause:' .. until_ms)
return { wanted, now }
