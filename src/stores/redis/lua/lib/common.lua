-- Shared helpers, included at build time by scripts/gen-lua.mjs (`-- @include common`).
-- All time is integer microseconds. Lua numbers are doubles: integers below 2^53 are
-- exact, but tostring() prints only 14 digits and Redis truncates fractional numbers in
-- replies, so every number written to a key or a reply is formatted explicitly.

if redis.replicate_commands then
  redis.replicate_commands()
end

-- The store's clock: Redis TIME in µs, or (test-only mode) the µs value given in `arg`.
local function now_us(arg)
  if arg ~= nil and arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- True in the test-only clock mode: keys then get long TTLs, because virtual time does not
-- follow the server's clock (the arithmetic treats stale state as fresh either way).
local function test_mode(arg)
  return arg ~= nil and arg ~= ''
end

-- An integer (a double with no fraction) as a decimal string, all digits.
local function int_str(n)
  return string.format('%d', n)
end

-- Epoch µs as epoch ms with three decimals ("1700000000123.456"): exact, human readable.
local function us_to_ms_str(us)
  return string.format('%d.%03d', math.floor(us / 1000), us % 1000)
end

-- Epoch ms (any decimal form, e.g. a sorted-set score) back to integer µs.
local function ms_str_to_us(s)
  return math.floor(tonumber(s) * 1000 + 0.5)
end

-- A TTL in whole ms (at least 1) for state that may vanish `us` µs from now.
local function ttl_ms(us, testing)
  local ms = math.ceil(us / 1000)
  if ms < 1 then
    ms = 1
  end
  if testing then
    ms = ms + 600000
  end
  return ms
end

-- The farthest ahead of the clock valve ever writes a time (365 days), plus a day of slack
-- for a clock step (e.g. a failover to a replica whose clock is behind).
local AHEAD = 366 * 86400000000

-- The error reply for a key holding what valve never writes: it names the key.
local function corrupt(key, raw, expected)
  return redis.error_reply('VALVE_CORRUPT_STATE ' .. key .. ' holds ' .. string.format('%q', string.sub(raw, 1, 64)) ..
    ', not ' .. expected .. ' (valve never writes that; something else did): delete the key')
end

-- A stored time (epoch ms, up to 3 decimals, as us_to_ms_str writes it) in µs, or nil when it
-- is malformed or further ahead of `now` than valve ever writes.
local function stored_ms_to_us(raw, now)
  if not string.find(raw, '^%d+%.?%d*$') then
    return nil
  end
  local us = math.floor(tonumber(raw) * 1000 + 0.5)
  if us > now + AHEAD then
    return nil
  end
  return us
end

-- Wake-up notification on the id's channel: 'p' PUBLISH, 's' SPUBLISH (cluster), '' none.
-- Called after the script's writes: a refused publish (an ACL without the channel, a
-- cross-slot channel) must not fail a call whose writes are done, so its error is ignored.
-- Wake-ups are hints: a valve that misses one polls or rechecks as it would without them.
local function notify(mode, channel, message)
  if mode == 's' then
    redis.pcall('SPUBLISH', channel, message)
  elseif mode == 'p' then
    redis.pcall('PUBLISH', channel, message)
  end
end
