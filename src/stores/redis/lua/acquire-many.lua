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

KEYS         every request's keys, one request after the other: acquire.lua's KEYS (5 + m of
             them), or in the short form its pause, rule and record keys (KEYS[1], KEYS[4..3+m]
             and KEYS[4+m], 2 + m of them), and with ticket 0 its line key too (KEYS[5+m])
ARGV[1]      "" (use Redis TIME), or the time in µs (test-only virtual clock): acquire.lua's ARGV[1]
ARGV[2]      k, the number of requests
ARGV[3]      s, the number of shapes
then         s shapes, each its length L and then L strings: m, lease limit, lease ttl, the
             3m rule arguments, the record argument and its TTL (acquire.lua's ARGV[3..5],
             ARGV[7..6+3m] and ARGV[t..t+1])
then         k requests, 5 strings each: its shape (1..s), n, the lease token nonce, the cost of
             every job, the ticket (acquire.lua's ARGV[2], ARGV[6], ARGV[7+3m] and ARGV[t+2]);
             or, in the short form, one string per run of consecutive requests alike,
             "-<shape>:<n>:<cost of every job>:<requests in the run>" (no nonce, no ticket), or
             "+<shape>:..." for requests with ticket 0 (taking part in the line, holding no
             ticket: what a valve under rules that absorb a late start sends until it is
             refused), for a shape without leases whose rules are all GCRA or fixed windows (the
             client sends no other in the short form)

The short form (no leases, GCRA and fixed-window rules only, no ticket held: what a valve
group's keys send) takes fast_one() below: acquire_one()'s steps for exactly that case,
with the shape's numbers converted once per call instead of once per request (and the fixed
windows' index, which depends only on the time, once per call); anything else acquire_one().
test/property/redis-differential.test.ts checks both against the memory store.

Flags (#!lua, no allow-oom): as acquire.lua.
Reply: { reply_1, ..., reply_k }: each request's acquire.lua reply, or its error reply (a
request whose state is corrupt, or that fails, fails alone: the others are answered). A
short-form request whose n jobs were all granted, with no other rule set recorded, is
answered by one integer instead, the time of the decision in µs (acquire.lua's reply
{ n, 0, 0, 0, now, 0 }, or with ticket 0 { n, 0, 0, 0, now, 0, 0 }: the client knows n).
]]

if redis.replicate_commands then
  redis.replicate_commands()
end

-- @include acquire-one

-- The call's KEYS as a local (an upvalue of fast_one: not a global's lookup per use).
local KEYS = KEYS

-- A shape's numbers, converted once per call; nil when its requests take acquire_one().
-- { m, xs, ys, caps (GCRA: burst × emission; nil for a fixed window), ks (the fixed window's
-- index at `now`), record (nil: none sent), record TTL (ms), incs (GCRA: ceil(x), a job of
-- cost 1's increment), gcra (every rule GCRA: its requests take part in the line when sent
-- with ticket 0) }
local function fast_shape(shape, now)
  local m = tonumber(shape[1])
  if m < 1 or tonumber(shape[2]) ~= 0 then
    return nil
  end
  local xs, ys, caps, ks, incs = {}, {}, {}, {}, {}
  local gcra = true
  for r = 1, m do
    local kind = shape[1 + 3 * r]
    local x, y = tonumber(shape[2 + 3 * r]), tonumber(shape[3 + 3 * r])
    xs[r], ys[r] = x, y
    if kind == 'g' then
      caps[r] = y * x
      incs[r] = ceil(x)
    elseif kind == 'w' then
      ks[r] = window_index(now, x)
      gcra = false
    else
      return nil
    end
  end
  local rec = shape[4 + 3 * m]
  local record = nil
  if string.sub(rec, 1, 1) == '=' then
    record = string.sub(rec, 2)
  end
  return { m, xs, ys, caps, ks, record, tonumber(shape[5 + 3 * m]), incs, gcra }
end

-- Per rule of the request fast_one() is answering: the GCRA tat or the window count read.
local fst = {}
-- A state TTL's text by the µs until the state is fresh again (the requests of a call mostly
-- write the same few): each formatted once per call.
local ttls = {}

-- acquire_one() for a short-form request of `fs` (see fast_shape) whose keys (pause, rules,
-- record, and when `lined` the line) start after KEYS[kf] (the caller checked that they are
-- there): n jobs of cost c each, no leases, no ticket, or (`lined`) ticket 0. The same reads,
-- writes, checks and reply, in the same order. With ticket 0, acquire_one() reads and writes
-- the line only when a job is refused on rate under GCRA rules only: then fast_one() writes
-- nothing and returns false and what the record's check returned, and the caller hands the
-- request to acquire_one().
-- Inlined here (the per-admission path): read(), pause_until()'s read of a missing pause,
-- gcra_tat() of a missing state, gcra_fit() for one job, write_state() and ttl_ms().
-- The call's clock (see below), upvalues of fast_one.
local now, testing
local function fast_one(kf, fs, n, c, lined)
  local m = fs[1]
  -- The shared pause (epoch ms with 3 decimals -> µs).
  local pkey = KEYS[kf + 1]
  local paused = rpcall('GET', pkey)
  if paused then
    local until_us, bad = pause_of(pkey, paused, now)
    if not until_us then
      return bad
    end
    if until_us > now then
      if lined then
        return { 0, until_us - now, 1, until_us, now, 0, 0 }
      end
      return { 0, until_us - now, 1, until_us, now, 0 }
    end
  end

  -- The record of the id's rule set, compared and written.
  local recorded = nil
  local record = fs[6]
  if record then
    local bad_record
    recorded, bad_record = check_record(KEYS[kf + 2 + m], record, fs[7], now, testing)
    if recorded == false then
      return bad_record
    end
  end

  -- Each rule's longest fitting prefix, computed arithmetically; the batch grants the shortest.
  local caps = fs[4]
  local fit_min, wait = n, 0
  for r = 1, m do
    local key = KEYS[kf + 1 + r]
    local raw = rpcall('GET', key)
    -- A key of another type: redis.pcall's error table (`raw.err` of a string is string.err, nil;
    -- cheaper than a call of type()).
    if raw and raw.err then
      return corrupt(key, 'a value of another type', 'a string')
    end
    local cap = caps[r]
    local fit, w
    if cap then
      local tat = now
      if raw then
        -- gcra_tat(), inlined.
        tat = find(raw, '^%d+$') and raw + 0
        if not tat or tat > now + cap + SPAN then
          return corrupt(key, raw, GCRA_EXPECTED)
        end
        if tat < now then
          tat = now
        end
      end
      local inc = c == 1 and fs[8][r] or charge(c, fs[2][r], cap)
      if n == 1 then
        -- gcra_fit() for one job: it fits iff tat + inc - now <= cap.
        local over = tat + inc - now - cap
        if over <= 0 then
          fit = 1
        else
          fit, w = 0, over
        end
      else
        fit, w = gcra_fit(tat, now, cap, inc, n)
      end
      fst[r] = tat
    else
      -- Fixed window: a state of another window counts as 0.
      local k = fs[5][r]
      local y = fs[3][r]
      local count, bad = window_count(key, raw, y, k)
      if not count then
        return bad
      end
      fit = count_fit(count, c, y, n)
      if fit < n then
        w = (k + 1) * fs[2][r] - now
      end
      fst[r] = count
    end
    if fit < fit_min then
      fit_min = fit
      wait = w or 0
    elseif fit == fit_min and w and w > wait then
      wait = w
    end
  end
  local granted = fit_min
  if lined and granted < n and fs[9] then
    -- Refused on rate with ticket 0 under GCRA rules: the line is read and a ticket taken.
    return false, recorded
  end
  if granted > 0 then
    -- Spend: every rule's state, with a TTL (see acquire_one) at which it would be fresh again.
    for r = 1, m do
      local us, value
      if caps[r] then
        local s = fst[r] + granted * (c == 1 and fs[8][r] or ceil(c * fs[2][r]))
        -- Kept one interval past tat (acquire_one's gcra_keep()).
        us = s - now + gcra_keep(KEYS[kf + 1 + r], r)
        value = format('%d', s)
      else
        local s = fst[r]
        if c % 1 == 0 and s % 1 == 0 then
          s = s + granted * c
        else
          for _ = 1, granted do
            s = s + c
          end
        end
        local k = fs[5][r]
        us = (k + 1) * fs[2][r] - now
        value = format('%d', k) .. ':' .. format('%.17g', s)
      end
      local text = ttls[us]
      if not text then
        -- write_state(): the TTL in whole ms, at least 1, ten minutes longer under the test clock.
        local ttl = ceil(us / 1000)
        if ttl < 1 then
          ttl = 1
        end
        if testing then
          ttl = ttl + 600000
        end
        text = format('%d', ttl)
        ttls[us] = text
      end
      rcall('SET', KEYS[kf + 1 + r], value, 'PX', text)
    end
  end
  if granted == n and not recorded then
    -- The short reply: every job granted, at `now`.
    return now
  end
  local reply
  if granted < n then
    reply = { granted, wait, 2, 0, now, 0 }
  else
    reply = { granted, 0, 0, 0, now, 0 }
  end
  if recorded then
    reply[7] = recorded
  end
  if lined then
    -- The ticket held: none.
    reply[#reply + 1] = 0
  end
  return reply
end

-- A request's reply from pcall(): its reply, or its error as an error reply.
local function answer(ok, reply)
  if ok or (type(reply) == 'table' and reply.err) then
    return reply
  end
  return redis.error_reply(tostring(reply))
end

local clock = ARGV[1]
local k = tonumber(ARGV[2])
local s = tonumber(ARGV[3])
local time_us = nil
if clock == '' then
  local t = redis.call('TIME')
  time_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
testing = clock ~= ''
now = testing and tonumber(clock) or time_us
local shapes, fast = {}, {}
local a = 4
for i = 1, s do
  local len = tonumber(ARGV[a])
  local shape = {}
  for j = 1, len do
    shape[j] = ARGV[a + j]
  end
  shapes[i] = shape
  fast[i] = fast_shape(shape, now) or false
  a = a + 1 + len
end
-- acquire.lua's ARGV for a request of `shape`: n jobs, the lease nonce, the cost of every job,
-- the ticket.
local function long_argv(shape, n, nonce, cost, ticket)
  local argv = { clock, n, shape[1], shape[2], shape[3], nonce }
  local r3 = 3 * tonumber(shape[1])
  for j = 1, r3 do
    argv[6 + j] = shape[3 + j]
  end
  argv[7 + r3] = cost
  argv[8 + r3] = shape[4 + r3]
  argv[9 + r3] = shape[5 + r3]
  argv[10 + r3] = ticket
  argv[11 + r3] = ''
  return argv
end
local out = {}
local kf = 0
local nkeys = #KEYS
-- A short-form run's numbers by its string ("-1:1:1:64"), converted once per call:
-- { shape, n, cost, requests, n's string, cost's string }.
local runs = {}
local i = 0
while i < k do
  local arg = ARGV[a]
  local lead = string.byte(arg, 1)
  if lead == 45 or lead == 43 then
    -- A run of short-form requests: '-' without a ticket, '+' with ticket 0 (taking part in
    -- the line, holding no ticket; their keys end with the line's).
    local run = runs[arg]
    if not run then
      local ss, sn, sc, sr = string.match(arg, '^[-+](%d+):([^:]+):([^:]+):(%d+)$')
      if not ss then
        return redis.error_reply('valve: acquire-many: a malformed short-form run ' .. arg)
      end
      run = { tonumber(ss), tonumber(sn), tonumber(sc), tonumber(sr), sn, sc }
      runs[arg] = run
    end
    a = a + 1
    local lined = lead == 43
    local fs = fast[run[1]]
    local fm = fs and fs[1] or tonumber(shapes[run[1]][1])
    local nk = lined and 3 + fm or 2 + fm
    local n, c = run[2], run[3]
    for _ = 1, run[4] do
      i = i + 1
      if not fs then
        out[i] = redis.error_reply('valve: acquire-many: a short-form request of a shape that has none')
      elseif kf + nk > nkeys then
        out[i] = redis.error_reply('valve: acquire-many: a request past the last key')
      else
        local ok, reply, recorded = pcall(fast_one, kf, fs, n, c, lined)
        if ok and reply == false then
          -- Handed to acquire_one() (see fast_one), its record already checked. Its keys:
          -- pause, no leases (the shape has none), rules, record, line.
          local keys = { KEYS[kf + 1], false, false }
          for j = 1, fm + 2 do
            keys[3 + j] = KEYS[kf + 1 + j]
          end
          ok, reply = pcall(acquire_one, keys, long_argv(shapes[run[1]], run[5], '', run[6], '0'), time_us,
            { recorded })
          out[i] = answer(ok, reply)
        elseif ok then
          out[i] = reply
        else
          out[i] = answer(ok, reply)
        end
      end
      kf = kf + nk
    end
  else
    i = i + 1
    local shape = shapes[tonumber(arg)]
    local m = tonumber(shape[1])
    local nk = 5 + m
    local keys = {}
    for j = 1, nk do
      keys[j] = KEYS[kf + j]
    end
    kf = kf + nk
    local argv = long_argv(shape, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4])
    a = a + 5
    local ok, reply = pcall(acquire_one, keys, argv, time_us)
    out[i] = answer(ok, reply)
  end
end
return out
