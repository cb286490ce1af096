--[[
acquire.lua: one admission for a batch of queued jobs of one valve id (see docs/architecture.md,
"The arithmetic"). Checks the shared pause, then grants the longest prefix of jobs that fits
every rule (each job checked against the state as updated by the jobs granted before it) and,
when leases are wanted, a free global-concurrency slot; spends the prefix on every rule.

KEYS[1]      <prefix>:{<id>}:pause   string, pausedUntil (epoch ms, 3 decimals)
KEYS[2]      <prefix>:{<id>}:leases  sorted set, lease token -> expiresAt (epoch ms)
KEYS[3]      <prefix>:{<id>}:fence   string, the last fencing number
KEYS[3+r]    <prefix>:{<id>}:r:<digest of rule r>, r = 1..m
                                     string, GCRA tat (µs) or fixed window "<k>:<count>"
ARGV[1]      "" (use Redis TIME), or the time in µs (test-only virtual clock)
ARGV[2]      n, the number of jobs
ARGV[3]      m, the number of rules
ARGV[4]      lease limit, 0 when no leases are wanted
ARGV[5]      lease ttl (µs)
ARGV[6]      lease token nonce (random per call)
ARGV[7+3(r-1)..9+3(r-1)]  rule r: "g", emissionUs, burst   or   "w", intervalUs, limit
ARGV[7+3m..6+3m+n]        the cost of each job, in queue order

Reply: { granted, retryAfterUs, blocked, pausedUntilUs, nowUs, leaseExpiresUs,
         token_1, fence_1, ..., token_granted, fence_granted }
  blocked: 0 whole batch granted, 1 pause, 2 rate, 3 concurrency
  retryAfterUs: µs until the first refused job could fit (0 when all granted)
  pausedUntilUs: the active pause's end, 0 when not paused
  leaseExpiresUs: expiry of the leases granted in this call, 0 without leases
]]

-- @include common

local clock = ARGV[1]
local testing = test_mode(clock)
local now = now_us(clock)
local n = tonumber(ARGV[2])
local m = tonumber(ARGV[3])
local lease_limit = tonumber(ARGV[4])
local lease_ttl = tonumber(ARGV[5])
local nonce = ARGV[6]

-- The shared pause.
local paused = redis.call('GET', KEYS[1])
if paused then
  local until_us = ms_str_to_us(paused)
  if until_us > now then
    return { 0, until_us - now, 1, until_us, now, 0 }
  end
end

-- Rule state, read once and updated in place as jobs are granted.
local kinds, a, b, state_tat, state_k, state_count = {}, {}, {}, {}, {}, {}
for r = 1, m do
  local base = 6 + 3 * (r - 1)
  local kind = ARGV[base + 1]
  kinds[r] = kind
  a[r] = tonumber(ARGV[base + 2])
  b[r] = tonumber(ARGV[base + 3])
  local raw = redis.call('GET', KEYS[3 + r])
  if kind == 'g' then
    -- Missing state means tat = now.
    local tat = raw and tonumber(raw) or now
    if tat < now then
      tat = now
    end
    state_tat[r] = tat
  else
    local k = math.floor(now / a[r])
    -- Guard against the float division rounding up across a window edge.
    if k * a[r] > now then
      k = k - 1
    end
    local count = 0
    if raw then
      local sk, sc = string.match(raw, '^(%-?%d+):(.+)$')
      -- A state of another window counts as 0.
      if sk and tonumber(sk) == k then
        count = tonumber(sc)
      end
    end
    state_k[r] = k
    state_count[r] = count
  end
end

-- Leases: purge expired ones, count the held.
local free = 0
if lease_limit > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', us_to_ms_str(now))
  free = lease_limit - redis.call('ZCARD', KEYS[2])
end

local granted, retry, blocked = 0, 0, 0
local cost_base = 6 + 3 * m
local next_tat = {}
for i = 1, n do
  local c = tonumber(ARGV[cost_base + i])
  if lease_limit > 0 and granted >= free then
    -- No free slot (the hint, the earliest lease expiry, is computed once leases are issued).
    blocked = 3
    break
  end
  local wait = -1
  for r = 1, m do
    if kinds[r] == 'g' then
      local tat = state_tat[r]
      local new = math.max(tat, now) + math.ceil(c * a[r])
      local over = new - now - b[r] * a[r]
      if over > 0 then
        if over > wait then
          wait = over
        end
      else
        next_tat[r] = new
      end
    else
      if state_count[r] + c > b[r] then
        local w = (state_k[r] + 1) * a[r] - now
        if w > wait then
          wait = w
        end
      end
    end
  end
  if wait >= 0 then
    blocked = 2
    retry = wait
    break
  end
  for r = 1, m do
    if kinds[r] == 'g' then
      state_tat[r] = next_tat[r]
    else
      state_count[r] = state_count[r] + c
    end
  end
  granted = i
end

-- No free slot: hint at the earliest expiry of a held lease (a release usually wakes sooner).
local function concurrency_hint()
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if first[2] then
    return ms_str_to_us(first[2]) - now
  end
  return 0
end

if granted == 0 then
  if blocked == 3 then
    retry = concurrency_hint()
  end
  return { 0, retry, blocked, 0, now, 0 }
end

-- Spend: write every rule's state with a TTL at which it would be fresh again.
for r = 1, m do
  if kinds[r] == 'g' then
    local tat = state_tat[r]
    redis.call('SET', KEYS[3 + r], int_str(tat), 'PX', ttl_ms(tat - now, testing))
  else
    local k = state_k[r]
    redis.call(
      'SET',
      KEYS[3 + r],
      int_str(k) .. ':' .. string.format('%.17g', state_count[r]),
      'PX',
      ttl_ms((k + 1) * a[r] - now, testing)
    )
  end
end

local reply = { granted, retry, blocked, 0, now, 0 }
if lease_limit > 0 then
  local expires = now + lease_ttl
  local expires_ms = us_to_ms_str(expires)
  -- The fencing number only grows: one more than the last, and never below the clock in µs,
  -- so it keeps growing even after the fence key expired or was lost.
  local fence = tonumber(redis.call('GET', KEYS[3]) or '0')
  for i = 1, granted do
    fence = math.max(fence + 1, now)
    local token = nonce .. '.' .. int_str(fence)
    redis.call('ZADD', KEYS[2], expires_ms, token)
    reply[#reply + 1] = token
    reply[#reply + 1] = fence
  end
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  local ttl = ttl_ms(ms_str_to_us(last[2]) - now, testing)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('SET', KEYS[3], int_str(fence), 'PX', ttl)
  reply[6] = expires
  if blocked == 3 then
    reply[2] = concurrency_hint()
  end
end
return reply
