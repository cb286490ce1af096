#!lua
--[[
window.lua: the provider window one valve id's fleet learnt from its responses (wrapFetch): a
ticket before each request, a report after each answer. Mirrors src/stores/window-record.ts
(see its comment for the model); every time is integer µs on the store's clock.

KEYS[1]  <prefix>:{<id>}:window   string "seq,reset,left,low,start,spent,probe,pseq,flight" (integers)
ARGV[1]  "" (use Redis TIME), or the time in µs (test-only virtual clock)
ARGV[2]  "s" a ticket, "r" a report
ARGV[3]  s: the probe's longest time in flight (µs);  r: the answer's send number
ARGV[4]  r: the remaining count, or -1 (an answer without a window: it only ends its probe)
ARGV[5]  r: the reset's upper bound from now (µs)

Flags (#!lua, no allow-oom): refused whole under OOM; wrapFetch then sends without a ticket.
Errors: "VALVE_CORRUPT_STATE <key> ..." when the key holds what valve never writes.

Reply: s: { seq, waitUs, probe (0/1; with seq 0: waiting for a probe's answer) }   r: { waitUs } (until the reset when the count is spent, else 0)
The key lives 60 s past its reset and probe, refreshed by every call.
]]

-- @include common

local clock = ARGV[1]
local testing = test_mode(clock)
local now = now_us(clock)
local key = KEYS[1]
local KEEP = 60000000
-- An answer whose reset lies more than this (µs) past the known window's bound is another window's
-- (window-record.ts's OTHER_WINDOW_US).
local OTHER_WINDOW = 2000000
-- A probe recorded as ending more than this (µs) past the asking caller's own time in flight has
-- ended: a server clock stepped back, or a foreign write (window-record.ts's STUCK_PROBE_SLACK_US).
local STUCK_SLACK = 5000000

local FIELDS = { 'seq', 'reset', 'left', 'low', 'start', 'spent', 'probe', 'pseq', 'flight' }
local rec = {}
local raw = redis.pcall('GET', key)
if type(raw) == 'table' then
  return corrupt(key, 'a value of another type', 'a string')
end
local parts = {}
if raw then
  for v in string.gmatch(raw, '[^,]+') do
    parts[#parts + 1] = v
  end
  if #parts ~= #FIELDS then
    return corrupt(key, raw, 'nine integers separated by commas')
  end
end
for i, name in ipairs(FIELDS) do
  local v = parts[i]
  if v then
    local n = tonumber(v)
    if n == nil or n ~= math.floor(n) or math.abs(n) > now + AHEAD then
      return corrupt(key, raw, 'nine integers separated by commas')
    end
    rec[name] = n
  else
    rec[name] = 0
  end
end

local function save()
  local out = {}
  for i, name in ipairs(FIELDS) do
    out[i] = int_str(rec[name])
  end
  local until_us = math.max(rec.reset, rec.probe, now)
  redis.call('SET', key, table.concat(out, ','), 'PX', ttl_ms(until_us - now + KEEP, testing))
end

if ARGV[2] == 's' then
  local ttl = tonumber(ARGV[3])
  if rec.probe > now + ttl + STUCK_SLACK then
    rec.probe = 0
  end
  if rec.probe > now then
    return { 0, rec.probe - now, 1 }
  end
  if rec.reset > now then
    if rec.left <= 0 then
      return { 0, rec.reset - now, 0 }
    end
    rec.left = rec.left - 1
    rec.seq = rec.seq + 1
    rec.flight = rec.flight + 1
    save()
    return { rec.seq, 0, 0 }
  end
  local probe = rec.seq == 0
  rec.seq = rec.seq + 1
  rec.flight = rec.flight + 1
  if rec.reset > 0 then
    probe = rec.spent == 1
    rec.reset = 0
    rec.spent = 0
    rec.left = 0
    rec.low = 0
    rec.start = rec.seq
    rec.flight = 1
  end
  if probe then
    rec.probe = now + ttl
    rec.pseq = rec.seq
    save()
    return { rec.seq, 0, 1 }
  end
  save()
  return { rec.seq, 0, 0 }
end

local seq = tonumber(ARGV[3])
local remaining = tonumber(ARGV[4])
local reset_us = tonumber(ARGV[5])
if rec.probe > 0 and rec.pseq == seq then
  rec.probe = 0
end
local stale = rec.reset > 0 and rec.reset <= now
if seq >= rec.start and seq <= rec.seq and not stale then
  if rec.flight > 0 then
    rec.flight = rec.flight - 1
  end
  if remaining >= 0 then
    if rec.reset > now and now + reset_us - OTHER_WINDOW > rec.reset then
      -- Another limit's window (a reset that cannot lie in the known one): the lower count decides.
      if remaining <= rec.low then
        rec.reset = now + reset_us
        rec.low = remaining
      end
    elseif rec.reset > now then
      if remaining <= rec.low then
        if now + reset_us < rec.reset then
          rec.reset = now + reset_us
        end
        rec.low = remaining
      end
    else
      rec.reset = now + reset_us
      rec.low = remaining
    end
  end
  if rec.reset > now then
    rec.left = rec.low - rec.flight
    if rec.left <= 0 then
      rec.spent = 1
    end
  end
end
save()
if rec.reset > now and rec.left <= 0 and rec.low <= 0 then
  return { rec.reset - now }
end
return { 0 }
