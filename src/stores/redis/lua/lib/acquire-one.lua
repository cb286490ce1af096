--[[
acquire-one.lua (included by acquire.lua and acquire-many.lua): `acquire_one(KEYS, ARGV, time_us)`
is one admission for one valve id, its keys and arguments as acquire.lua's header lists them,
returning acquire.lua's reply (or an error reply). `time_us`: the server time in µs already
read by the caller (acquire-many.lua reads TIME once for every id of its call), or nil to read
it here; a test clock in ARGV[1] overrides both.

The hot path: one closure per call at most (the line's reader), no lib/common.lua (its
helpers are inlined), one scratch table, every ARGV converted once.
]]
-- Globals used on the hot path, as upvalues: one lookup instead of two (or a global's) each.
local tonumber, type = tonumber, type
local format, find, match, sub = string.format, string.find, string.match, string.sub
local rcall, rpcall = redis.call, redis.pcall
-- The farthest ahead of the clock valve ever writes a time (365 days), plus a day of slack
-- for a clock step (e.g. a failover to a replica whose clock is behind).
local AHEAD = 366 * 86400000000
-- The longest interval (365 days): a GCRA state runs at most the burst tolerance plus one
-- interval ahead (a rule change's conversion, src/rules/convert.ts); more is not valve's.
local SPAN = 365 * 86400000000
-- The farthest ahead a line's turn or step goes: a GCRA wait is at most a burst tolerance plus
-- an interval (a converted state) plus a charge of burst + 1 emission intervals, each at most
-- 365 days; with the slack of AHEAD. Also the farthest its last turn lies after its head's
-- (TURN_SPAN_US in src/stores/turns.ts): a ticket is taken only within it, so every line
-- written keeps (tail - head - 1) * gap <= LINE_AHEAD, however many callers wait.
local LINE_AHEAD = 3 * AHEAD
local function corrupt(key, raw, expected)
  return redis.error_reply('VALVE_CORRUPT_STATE ' .. key .. ' holds ' .. format('%q', string.sub(raw, 1, 64)) ..
    ', not ' .. expected .. ' (valve never writes that; something else did): delete the key')
end
-- A string key's value (false when missing); an error reply naming the key when it is no string.
local function read(key)
  local raw = rpcall('GET', key)
  if type(raw) == 'table' then
    return nil, corrupt(key, 'a value of another type', 'a string')
  end
  return raw
end

local floor, ceil = math.floor, math.ceil
-- A sliding-window log whose sum does not match its entries (see the read of the logs below).
local SUM_EXPECTED = 'a sliding-window log whose first element is the sum of its entries\' costs'

-- The end of the id's shared pause in µs (epoch ms with 3 decimals in `key`), 0 when there is
-- none; nil and an error reply naming the key when it holds something else. pause_of(): the
-- same from what GET answered for `key` (not false: a string, or the error of another type).
local function pause_of(key, paused, now)
  if type(paused) == 'table' then
    return nil, corrupt(key, 'a value of another type', 'a string')
  end
  local until_us = find(paused, '^%d+%.?%d*$') and floor(tonumber(paused) * 1000 + 0.5)
  if not until_us or until_us > now + AHEAD then
    return nil, corrupt(key, paused, 'a pause end in epoch ms at most 365 days ahead')
  end
  return until_us
end
local function pause_until(key, now)
  local paused = rpcall('GET', key)
  if not paused then
    return 0
  end
  return pause_of(key, paused, now)
end

-- The rule set recorded for the id in `key` ("<until µs>:<digests>") compared with `record`,
-- and written for `ttl` ms when it differs. Returns the other rule set held until now (nil: the
-- same, or none), or false and an error reply naming the key. The digests' characters are
-- checked once per distinct string and call (a group's keys hold the same).
local digests_ok = {}
local function check_record(key, record, ttl, now, testing)
  local raw = rpcall('GET', key)
  -- Held until then (the key's TTL says the same on the real clock).
  local held = nil
  if raw then
    if raw.err then
      -- (redis.pcall's error table: a key of another type; a string's .err is string.err, nil)
      return false, corrupt(key, 'a value of another type', 'a string')
    end
    -- ^(%d+):([gws0-9.,]*)$ without captures and with one conversion: the digits before the
    -- first ':', then the digests (which hold no ':').
    local _, colon = find(raw, '^%d+:')
    local until_us, digests = nil, nil
    if colon then
      until_us, digests = sub(raw, 1, colon - 1) + 0, sub(raw, colon + 1)
      local ok = digests_ok[digests]
      if ok == nil then
        ok = find(digests, '^[gws0-9.,]*$') ~= nil
        digests_ok[digests] = ok
      end
      if not ok then
        until_us = nil
      end
    end
    if not until_us or until_us > now + AHEAD then
      return false, corrupt(key, raw, 'a rule set ("<until µs>:" and rule digests joined by commas)')
    end
    if until_us > now then
      held = digests
    end
  end
  if held == record then
    return nil
  end
  rcall('SET', key, format('%d', now + ttl * 1000) .. ':' .. record, 'PX', ttl + (testing and 600000 or 0))
  return held
end

-- A key's time to live for state that is fresh again `us` from now: whole ms, at least 1; ten
-- minutes longer under the test clock (whose time does not pass on the server's).
local function ttl_ms(us, testing)
  local ttl = ceil(us / 1000)
  if ttl < 1 then
    ttl = 1
  end
  return testing and ttl + 600000 or ttl
end

-- Writes a rule's state `value` to `key`, expiring `us` from now (when it would be fresh again;
-- a GCRA state one interval later, see gcra_keep()).
-- The TTL goes as a string: redis.call() would print a number as a float (snprintf), several
-- times the cost of '%d'. (SET, not PSETEX, which is cheaper: the least-privilege ACL of
-- docs/redis.md allows SET.)
local function write_state(key, value, us, testing)
  rcall('SET', key, value, 'PX', format('%d', ttl_ms(us, testing)))
end

-- How long (µs) a GCRA state's key outlives its tat: one interval of its rule, read from the
-- digest that ends the key ("<prefix>:{<id>}:r:g<limit>.<intervalUs>.<burst>",
-- src/stores/redis/keys.ts), and a millisecond. Kept that long, a missing key proves the
-- state's last tat lies at least one interval back, which a rule change's conversion counts on
-- (src/rules/convert.ts, spentSince(); a key expiring at tat could have been spent at full rate
-- until a moment before). The millisecond covers the server's expiry clock (whole ms, read when
-- the call starts) running up to a millisecond behind TIME. A key named otherwise (valve never
-- names one so) keeps the millisecond alone.
-- `r`: the rule's position in its request. The ":r:<digest>" that ended the last key of rule r
-- and its keep are remembered: a call's requests mostly share their rules, so the next key is
-- checked to end with it in place (no new string, no pattern) before any parsing.
local keep_suffix, keep_us = {}, {}
local function gcra_keep(key, r)
  local suffix = keep_suffix[r]
  if suffix and find(key, suffix, #key - #suffix + 1, true) then
    return keep_us[r]
  end
  local iv
  suffix, iv = match(key, '(:r:g%d+%.(%d+)%.%d+)$')
  local us = (iv and iv + 0 or 0) + 1000
  keep_suffix[r], keep_us[r] = suffix, us
  return us
end

-- A GCRA rule's tat read from `raw` (missing or past: now), or nil and an error reply naming `key`
-- (acquire-many.lua's fast_one has a copy inline).
local GCRA_EXPECTED = 'a GCRA time in epoch µs at most the burst tolerance ahead'
local function gcra_tat(key, raw, now, cap)
  if not raw then
    return now
  end
  -- (raw + 0: tonumber() of a string runs strtod twice, the coercion once.)
  local tat = find(raw, '^%d+$') and raw + 0
  if not tat or tat > now + cap + SPAN then
    return nil, corrupt(key, raw, GCRA_EXPECTED)
  end
  if tat < now then
    tat = now
  end
  return tat
end

-- The increment a GCRA rule (emission interval x, burst tolerance cap) charges a job of cost c
-- in its checks, never in a grant: ceil(c × x), at most cap + x. A cost above the burst never
-- fits (the valve sends one only for a previous rule of a rule change): it waits as a cost of
-- burst + 1 would, a wait below 2^53 µs (src/rules/gcra.ts, gcraCharge()).
local function charge(c, x, cap)
  local inc = ceil(c * x)
  if inc > cap + x then
    return cap + x
  end
  return inc
end

-- How many of n jobs, each adding `inc`, fit a GCRA state `tat` (>= now) of capacity `cap`, and
-- the wait of the first that does not (nil when all fit). Job j fits iff tat + j·inc − now ≤ cap.
local function gcra_fit(tat, now, cap, inc, n)
  local fit = floor((cap - (tat - now)) / inc)
  if fit < 0 then
    fit = 0
  elseif fit > n then
    fit = n
  end
  -- The division is a float: settle the boundary exactly (integers below 2^53).
  while fit > 0 and tat + fit * inc - now - cap > 0 do
    fit = fit - 1
  end
  while fit < n and tat + (fit + 1) * inc - now - cap <= 0 do
    fit = fit + 1
  end
  if fit < n then
    return fit, tat + (fit + 1) * inc - now - cap
  end
  return fit, nil
end

-- How many of n jobs of cost c fit a count (a window's or a sliding window's sum) under limit y.
local function count_fit(count, c, y, n)
  local fit
  if c % 1 == 0 and count % 1 == 0 then
    -- Integers: exact. Job j fits iff count + j·c ≤ limit.
    fit = floor((y - count) / c)
    if fit < 0 then
      fit = 0
    elseif fit > n then
      fit = n
    end
    while fit > 0 and count + fit * c > y do
      fit = fit - 1
    end
    while fit < n and count + (fit + 1) * c <= y do
      fit = fit + 1
    end
  else
    -- Fractions: add job by job, as the per-job loop does (same float sums).
    fit = 0
    local s = count
    while fit < n and s + c <= y do
      s = s + c
      fit = fit + 1
    end
  end
  return fit
end

-- The index of the fixed window of length x (µs) that holds `now`.
local function window_index(now, x)
  local k = floor(now / x)
  -- Guard against the float division rounding up across a window edge.
  if k * x > now then
    k = k - 1
  end
  return k
end

-- A fixed window's count in window k read from `raw` (missing, or another window's: 0), or nil
-- and an error reply naming `key`.
local function window_count(key, raw, y, k)
  if not raw then
    return 0
  end
  local sk, sc = match(raw, '^(%d+):(%d+%.?%d*)$')
  if not sk or tonumber(sc) > y then
    return nil, corrupt(key, raw, '"<window>:<count>" with a count from 0 to the limit')
  end
  if tonumber(sk) == k then
    return tonumber(sc)
  end
  return 0
end

-- `checked`: nil, or (acquire-many.lua's short form handing a request over) a table whose [1]
-- is what check_record() already returned for this request: the record is not checked again.
local function acquire_one(KEYS, ARGV, time_us, checked)
  local clock = ARGV[1]
  local testing = clock ~= ''
  local now
  if testing then
    now = tonumber(clock)
  elseif time_us then
    now = time_us
  else
    local t = rcall('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end

  -- The shared pause (epoch ms with 3 decimals -> µs).
  local until_us, bad = pause_until(KEYS[1], now)
  if not until_us then
    return bad
  end
  local n = tonumber(ARGV[2])
  local m = tonumber(ARGV[3])
  local shared = ARGV[7 + 3 * m]
  local tail = 8 + 3 * m + (shared == '' and n or 0)
  local roles = ARGV[tail + 3]
  local converting = roles and roles ~= ''
  -- Paused: nothing is granted. A rule change's conversion is done even so (below: it only
  -- writes state), then the same answer.
  local paused = until_us > now
  if paused and not converting then
    if ARGV[tail + 2] ~= '' then
      return { 0, until_us - now, 1, until_us, now, 0, 0 }
    end
    return { 0, until_us - now, 1, until_us, now, 0 }
  end

  local lease_limit = tonumber(ARGV[4])

  -- Leases: purge expired ones; `free` slots (n, i.e. never binding, without leases). The last
  -- fencing number is read (and checked) here, before anything is spent.
  local free = n
  local last_fence = 0
  if lease_limit > 0 and not paused then
    local raw_fence, bad_fence = read(KEYS[3])
    if bad_fence then
      return bad_fence
    end
    if raw_fence then
      last_fence = find(raw_fence, '^%d+$') and tonumber(raw_fence)
      if not last_fence or last_fence > now + AHEAD then
        return corrupt(KEYS[3], raw_fence, 'a fencing number (an integer near the clock in µs)')
      end
    end
    local purged = rpcall('ZREMRANGEBYSCORE', KEYS[2], '-inf', format('%d.%03d', floor(now / 1000), now % 1000))
    if type(purged) == 'table' then
      return corrupt(KEYS[2], 'a value of another type', 'a sorted set')
    end
    free = lease_limit - rcall('ZCARD', KEYS[2])
    if free < lease_limit then
      -- Every lease left expires after now; the latest no further ahead than any ttl.
      local latest = rcall('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
      local exp = tonumber(latest[2])
      if not exp or exp * 1000 > now + AHEAD then
        return corrupt(KEYS[2], latest[1] .. ' ' .. latest[2], 'lease expiries in epoch ms at most 365 days ahead')
      end
    end
  end

  -- A rule change (see src/rules/convert.ts): each new rule's state gets the units the previous
  -- rules' states prove may have been spent in its current window, written before the batch is
  -- read below. The record of the id's rule set is compared and written.
  if converting then
    local val, kk = {}, {}
    for r = 1, m do
      local base = 4 + 3 * r
      local kind, x, y, key = ARGV[base], tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), KEYS[3 + r]
      if kind == 's' then
        local all = rpcall('LRANGE', key, 0, -1)
        if all.err then
          return corrupt(key, 'a value of another type', 'a sliding-window log (a list)')
        end
        local live = 0
        for i = 2, #all - 1, 2 do
          local tn, cn = tonumber(all[i]), tonumber(all[i + 1])
          if not (tn and tn >= 0 and tn <= now + AHEAD and cn and cn > 0 and cn < math.huge) then
            return corrupt(key, tostring(all[i]) .. ' ' .. tostring(all[i + 1]),
              'a sliding-window log (a sum, then times in epoch µs and costs)')
          end
          if tn > now - x then
            live = live + cn
          end
        end
        val[r] = live
      else
        local raw, bad_rule = read(key)
        if bad_rule then
          return bad_rule
        end
        if kind == 'g' then
          -- The tat as stored (not raised to now: it bounds the units spent), at least
          -- now - interval: a missing key expired one interval after its last tat (gcra_keep());
          -- a key of a tat older than that (kept longer by the test clock) counts the same.
          local tat = now - tonumber(ARGV[tail + 1 + 3 * r])
          if raw then
            local t = find(raw, '^%d+$') and tonumber(raw)
            if not t or t > now + y * x + SPAN then
              return corrupt(key, raw, 'a GCRA time in epoch µs at most the burst tolerance ahead')
            end
            if t > tat then
              tat = t
            end
          end
          val[r] = tat
        else
          local k = floor(now / x)
          if k * x > now then
            k = k - 1
          end
          kk[r] = k
          local count = 0
          if raw then
            local sk, sc = match(raw, '^(%d+):(%d+%.?%d*)$')
            if not sk or tonumber(sc) > y then
              return corrupt(key, raw, '"<window>:<count>" with a count from 0 to the limit')
            end
            if tonumber(sk) == k then
              count = tonumber(sc)
            end
          end
          val[r] = count
        end
      end
    end
    for r = 1, m do
      if string.sub(roles, r, r) == 'n' then
        local base = 4 + 3 * r
        local kind, x, y, key = ARGV[base], tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), KEYS[3 + r]
        local iv, lim = tonumber(ARGV[tail + 1 + 3 * r]), tonumber(ARGV[tail + 2 + 3 * r])
        local start = kind == 'w' and kk[r] * x or now - iv + 1
        local units = math.huge
        for j = 1, m do
          -- A source whose state counts grants only since a time at or after the window's
          -- start cannot tell what was spent in it before: none.
          local since = ARGV[tail + 3 + 3 * j]
          if string.sub(roles, j, j) ~= 'n' and (since == '' or tonumber(since) < start) then
            local bj = 4 + 3 * j
            local kj, xj, yj, u = ARGV[bj], tonumber(ARGV[bj + 1]), tonumber(ARGV[bj + 2]), 0
            if kj == 'g' then
              if val[j] > start then
                u = floor((val[j] - start) / xj)
              end
            else
              local covered = kj == 'w' and kk[j] * xj or now - xj + 1
              local older = 0
              if start < covered then
                older = ceil((covered - start) / xj)
              end
              u = val[j] + older * yj
            end
            if u < units then
              units = u
            end
          end
        end
        if kind == 'g' then
          local cap = y * x
          local most = now + cap + iv
          local add = units < lim + y and units or lim + y
          -- Nothing to add: the state stays as it is (a missing one stays missing).
          if add > 0 then
            local tat = (val[r] > now and val[r] or now) + add * x
            if tat > most then
              tat = most
            end
            write_state(key, format('%d', tat), tat - now + gcra_keep(key, r), testing)
          end
        elseif kind == 'w' then
          local count = val[r] + units
          if count > y then
            count = y
          end
          write_state(key, format('%d', kk[r]) .. ':' .. format('%.17g', count), (kk[r] + 1) * x - now,
            testing)
        else
          local add = units < y and units or y
          if add > 0 then
            local head = rcall('LINDEX', key, 0)
            if not head then
              rcall('RPUSH', key, '0')
              head = '0'
            end
            rcall('RPUSH', key, format('%d', now), format('%.17g', add))
            rcall('LSET', key, 0, format('%.17g', tonumber(head) + add))
            rcall('PEXPIRE', key, ttl_ms(x, testing))
          end
        end
      end
    end
  end
  if paused then
    if ARGV[tail + 2] ~= '' then
      return { 0, until_us - now, 1, until_us, now, 0, 0 }
    end
    return { 0, until_us - now, 1, until_us, now, 0 }
  end
  local recorded = nil
  local record = ARGV[tail]
  if checked then
    recorded = checked[1]
  elseif record and string.sub(record, 1, 1) == '=' then
    local bad_record
    recorded, bad_record = check_record(KEYS[4 + m], string.sub(record, 2), tonumber(ARGV[tail + 1]), now, testing)
    if recorded == false then
      return bad_record
    end
  end

  -- The line (src/stores/turns.ts): for callers taking part, under GCRA rules only, without
  -- leases. lh, lt, la, ls: the live line's head, tail, head's turn and step (lh nil: no line),
  -- read when the caller holds a ticket (or, below, when it is refused); late tickets skipped.
  -- The ticket k places behind the head has its turn at la + k * gap, gap = ls + min(floor(ls / 8), 100).
  -- A caller holding a ticket behind the head is refused here, without reading the rules.
  local GRACE = 2000
  local ticket_arg = ARGV[tail + 2]
  local lined = ticket_arg ~= '' and lease_limit == 0 and m > 0
  if lined then
    for r = 1, m do
      if ARGV[4 + 3 * r] ~= 'g' then
        lined = false
      end
    end
  end
  local ticket = lined and tonumber(ticket_arg) or 0
  local lh, lt, la, ls
  -- Reads the live line into lh, lt, la, ls (late tickets skipped); an error reply when corrupt.
  local read_line
  if lined then
    read_line = function()
      local raw_line, bad_line = read(KEYS[5 + m])
      if bad_line then
        return bad_line
      end
      if raw_line then
        local h, t, a, s = match(raw_line, '^(%d+):(%d+):(%d+):(%d+)$')
        h, t, a, s = tonumber(h), tonumber(t), tonumber(a), tonumber(s)
        -- The last ticket's turn at most LINE_AHEAD after the head's (t - h - 1 gaps; tickets
        -- are taken only within it, whatever the number of callers), so at most 2 * LINE_AHEAD
        -- ahead: a wait or a TTL beyond it is not valve's. Tickets below 2^53 (exact).
        if not h or h >= t or t > 9007199254740991 or s < 1 or a > now + LINE_AHEAD or s > LINE_AHEAD
            or (t - h - 1) * (s + (s < 800 and floor(s / 8) or 100)) > LINE_AHEAD then
          return corrupt(KEYS[5 + m], raw_line, 'a line "<head>:<tail>:<turn µs>:<step µs>" with head < tail')
        end
        local gap = s + (s < 800 and floor(s / 8) or 100)
        if now <= a + (t - h - 1) * gap + GRACE then
          local late = now - a - GRACE
          if late > 0 then
            local k = floor((late - 1) / gap) + 1
            if k > t - h then
              k = t - h
            end
            h = h + k
            a = a + k * gap
          end
          if h < t then
            lh, lt, la, ls = h, t, a, s
          end
        end
      end
    end
  end
  local line_read, lhead = false, false
  if lined and ticket > 0 then
    line_read = true
    local bad_line = read_line()
    if bad_line then
      return bad_line
    end
    if lh and ticket >= lh and ticket < lt then
      local turn = la + (ticket - lh) * (ls + (ls < 800 and floor(ls / 8) or 100))
      if ticket == lh then
        lhead = true
      elseif turn <= now then
        -- Its turn has come and the tickets before it did not use theirs: it goes first.
        lh, la, lhead = ticket, turn, true
      else
        -- Behind the head: wait for its turn. Nothing is read or spent.
        local behind = { 0, turn - now, 2, 0, now, 0 }
        if recorded then
          behind[#behind + 1] = recorded
        end
        behind[#behind + 1] = ticket
        return behind
      end
    end
  end

  -- Sliding windows (see src/rules/sliding-window.ts): read each log's live sum, counting the
  -- entries that left the window (t <= now - intervalUs) from the head. Nothing is written
  -- yet: sl[r] = { live sum, list elements to drop after the sentinel, entries left }.
  local sl = {}
  for r = 1, m do
    local base = 4 + 3 * r
    if ARGV[base] == 's' then
      local key = KEYS[3 + r]
      local cut = now - tonumber(ARGV[base + 1])
      local limit = tonumber(ARGV[base + 2])
      local span = 33 -- the sentinel and 16 entries, then chunks of 33, 66, 132... elements
      local part = rpcall('LRANGE', key, 0, span - 1)
      if part.err then
        return corrupt(key, 'a value of another type', 'a sliding-window log (a list)')
      end
      local sum, drop, left = 0, 0, 0
      local stored = part[1]
      if stored then
        sum = tonumber(stored)
        local from, i = 0, 2 -- part[i] is list element from + i - 1
        while true do
          local t = part[i]
          if t == nil then
            if #part < span then
              break
            end
            from = from + span
            span = span * 2
            part = rcall('LRANGE', key, from, from + span - 1)
            i = 1
          else
            local tn, cn = tonumber(t), tonumber(part[i + 1])
            -- State this script did not write (NaN fails every comparison) is refused, naming the key.
            if not (sum and sum >= 0 and sum < math.huge and tn and tn >= 0 and tn <= now + AHEAD
                and cn and cn > 0 and cn < math.huge) then
              return corrupt(key, tostring(part[1]) .. ' ' .. tostring(t) .. ' ' .. tostring(part[i + 1]),
                'a sliding-window log (a sum, then times in epoch µs and costs)')
            end
            if tn > cut then
              left = 1
              -- The sum is its entries' (integer) costs, checked without adding them up: the
              -- live sum holds at least the oldest live entry's, and (when this read holds the
              -- whole list) at most the limit per live entry: a grant's entry and a rule
              -- change's each hold at most the limit (not the whole sum: a rule set changed
              -- back within an interval holds its own units and the other rules').
              if sum < cn or (#part < span and sum > limit * (from + #part - 1 - drop) / 2) then
                return corrupt(key, stored, SUM_EXPECTED)
              end
              break
            end
            sum = sum - cn
            drop = drop + 2
            i = i + 2
          end
        end
        if left == 0 then
          -- Every entry left: their costs were the whole sum.
          if sum ~= 0 then
            return corrupt(key, stored, SUM_EXPECTED)
          end
        else
          -- The newest entry too (the write below extends it or appends after it), before
          -- anything is written: a time ahead of any valve writes is refused.
          local newest = tonumber(rcall('LINDEX', key, -2))
          if not (newest and newest >= 0 and newest <= now + AHEAD) then
            return corrupt(key, tostring(rcall('LINDEX', key, -2)),
              'a sliding-window log (a sum, then times in epoch µs and costs)')
          end
        end
      end
      sl[r] = { sum, drop, left }
    end
  end

  -- Rule state, read once. Per rule r, at q = 5(r-1): st[q+1] true for GCRA; st[q+2] emissionUs
  -- or intervalUs; st[q+3] GCRA capacity (burst × emissionUs) or window limit; st[q+4] GCRA tat
  -- (>= now) or window count, as updated by the jobs granted; st[q+5] window index k.
  -- A sliding window is kept like a window (st[q+1] false, st[q+3] limit, st[q+4] live sum as
  -- updated by the jobs granted) without an index (st[q+5] nil); its wait is computed below.
  local st = {}
  local granted, retry, blocked = 0, 0, 0

  if shared ~= '' then
    -- Equal costs: each rule's longest fitting prefix computed arithmetically; the batch grants
    -- the shortest of them (and no more than the free lease slots). Exactly what the per-job
    -- loop below computes: job j fits a rule iff its state after j-1 equal jobs admits one more.
    local c = tonumber(shared)
    local fit_min, wait = n, 0
    for r = 1, m do
      local base = 4 + 3 * r
      local x = tonumber(ARGV[base + 1])
      local y = tonumber(ARGV[base + 2])
      local raw, bad_rule
      if ARGV[base] ~= 's' then
        raw, bad_rule = read(KEYS[3 + r])
        if bad_rule then
          return bad_rule
        end
      end
      local q = 5 * (r - 1)
      st[q + 2] = x
      local fit, w
      if ARGV[base] == 'g' then
        local cap = y * x
        local tat, bad = gcra_tat(KEYS[3 + r], raw, now, cap)
        if not tat then
          return bad
        end
        -- A cost above the burst never fits: charged as burst + 1 in the checks (see charge()).
        fit, w = gcra_fit(tat, now, cap, charge(c, x, cap), n)
        st[q + 1] = true
        st[q + 3] = cap
        st[q + 4] = tat
      elseif ARGV[base] == 's' then
        -- Job j fits iff sum + j·c <= limit (the wait, if any, is computed after the batch).
        local sum = sl[r][1]
        fit = count_fit(sum, c, y, n)
        st[q + 1] = false
        st[q + 3] = y
        st[q + 4] = sum
      else
        local k = window_index(now, x)
        local count, bad = window_count(KEYS[3 + r], raw, y, k)
        if not count then
          return bad
        end
        fit = count_fit(count, c, y, n)
        if fit < n then
          w = (k + 1) * x - now
        end
        st[q + 1] = false
        st[q + 3] = y
        st[q + 4] = count
        st[q + 5] = k
      end
      -- The first refused job is the same for every rule with the shortest prefix: its wait is
      -- the largest of theirs.
      if fit < fit_min then
        fit_min = fit
        wait = w or 0
      elseif fit == fit_min and w and w > wait then
        wait = w
      end
    end
    granted = fit_min
    if free < granted then
      granted = free > 0 and free or 0
    end
    if granted < n then
      if granted >= free then
        -- No free slot (the hint, the earliest lease expiry, is computed at the end).
        blocked = 3
      else
        blocked = 2
        retry = wait
      end
    end
    -- The state after `granted` jobs.
    if granted > 0 then
      for q = 0, 5 * m - 5, 5 do
        if st[q + 1] then
          st[q + 4] = st[q + 4] + granted * ceil(c * st[q + 2])
        elseif c % 1 == 0 and st[q + 4] % 1 == 0 then
          st[q + 4] = st[q + 4] + granted * c
        else
          local s = st[q + 4]
          for _ = 1, granted do
            s = s + c
          end
          st[q + 4] = s
        end
      end
    end
  else
    -- Mixed costs: job by job, each against every rule as updated by the jobs before it.
    for r = 1, m do
      local base = 4 + 3 * r
      local x = tonumber(ARGV[base + 1])
      local y = tonumber(ARGV[base + 2])
      local raw, bad_rule
      if ARGV[base] ~= 's' then
        raw, bad_rule = read(KEYS[3 + r])
        if bad_rule then
          return bad_rule
        end
      end
      local q = 5 * (r - 1)
      st[q + 2] = x
      if ARGV[base] == 'g' then
        local tat, bad = gcra_tat(KEYS[3 + r], raw, now, y * x)
        if not tat then
          return bad
        end
        st[q + 1] = true
        st[q + 3] = y * x
        st[q + 4] = tat
      elseif ARGV[base] == 's' then
        st[q + 1] = false
        st[q + 3] = y
        st[q + 4] = sl[r][1]
      else
        local k = window_index(now, x)
        local count, bad = window_count(KEYS[3 + r], raw, y, k)
        if not count then
          return bad
        end
        st[q + 1] = false
        st[q + 3] = y
        st[q + 4] = count
        st[q + 5] = k
      end
    end
    local last = 5 * m - 5
    local cost_base = 7 + 3 * m -- job i: ARGV[cost_base + i]
    for i = 1, n do
      if granted >= free then
        blocked = 3
        break
      end
      local c = tonumber(ARGV[cost_base + i])
      local wait = 0
      for q = 0, last, 5 do
        if st[q + 1] then
          local x = st[q + 2]
          local inc = ceil(c * x)
          if inc > st[q + 3] + x then
            -- charge(), inlined
            inc = st[q + 3] + x
          end
          local over = st[q + 4] + inc - now - st[q + 3]
          if over > wait then
            wait = over
          end
        elseif st[q + 4] + c > st[q + 3] then
          -- A sliding window (no index) marks the job refused; its wait is computed below.
          local w = st[q + 5] and (st[q + 5] + 1) * st[q + 2] - now or 1
          if w > wait then
            wait = w
          end
        end
      end
      if wait > 0 then
        blocked = 2
        retry = wait
        break
      end
      for q = 0, last, 5 do
        if st[q + 1] then
          st[q + 4] = st[q + 4] + ceil(c * st[q + 2])
        else
          st[q + 4] = st[q + 4] + c
        end
      end
      granted = i
    end
  end

  -- Sliding windows: the refused job's wait. With need = sum + c - limit, the job fits once the
  -- oldest entries holding `need` units have left: at t_p + intervalUs for the first entry p
  -- where their running sum reaches need (this call's own grants, not yet in the log, leave
  -- one interval from now).
  if blocked == 2 and next(sl) then
    local cr = tonumber(shared ~= '' and shared or ARGV[7 + 3 * m + granted + 1])
    for r, v in pairs(sl) do
      local q = 5 * (r - 1)
      local x, y, a = st[q + 2], st[q + 3], st[q + 4]
      if a + cr > y then
        local need = a + cr - y
        local w = x
        if v[3] == 1 then
          local key = KEYS[3 + r]
          local acc, from, span = 0, 1 + v[2], 32
          local found = false
          while not found do
            local part = rcall('LRANGE', key, from, from + span - 1)
            for i = 1, #part - 1, 2 do
              local tn, cn = tonumber(part[i]), tonumber(part[i + 1])
              if not (tn and tn >= 0 and tn <= now + AHEAD and cn and cn > 0 and cn < math.huge) then
                return corrupt(key, tostring(part[i]) .. ' ' .. tostring(part[i + 1]),
                  'a sliding-window log (a sum, then times in epoch µs and costs)')
              end
              acc = acc + cn
              if acc >= need then
                w = tn + x - now
                found = true
                break
              end
            end
            if #part < span then
              break
            end
            from = from + span
            span = span * 2
          end
        end
        if w > retry then
          retry = w
        end
      end
    end
  end

  -- Sliding windows: drop the entries that left, record this call's grants (one entry at `now`,
  -- merged into the newest when it has that time), and expire the key one interval after its
  -- newest entry.
  for r, v in pairs(sl) do
    local key = KEYS[3 + r]
    local q = 5 * (r - 1)
    local pending = 0
    if granted > 0 then
      pending = st[q + 4] - v[1]
    end
    if v[2] > 0 then
      if v[3] == 0 and pending == 0 then
        rcall('DEL', key)
      else
        rcall('LTRIM', key, v[2], -1)
      end
    end
    if pending > 0 then
      local newest = now
      if v[3] == 1 then
        newest = tonumber(rcall('LINDEX', key, -2))
        if not (newest and newest >= 0 and newest <= now + AHEAD) then
          return corrupt(key, tostring(rcall('LINDEX', key, -2)),
            'a sliding-window log (a sum, then times in epoch µs and costs)')
        end
      end
      if v[3] == 1 and newest >= now then
        local tail = tonumber(rcall('LINDEX', key, -1))
        rcall('LSET', key, -1, format('%.17g', tail + pending))
      else
        newest = now
        if v[3] == 0 and v[2] == 0 then
          -- No list yet (or an empty one): its sentinel first.
          rcall('DEL', key)
          rcall('RPUSH', key, '0')
        end
        rcall('RPUSH', key, format('%d', now), format('%.17g', pending))
      end
      rcall('LSET', key, 0, format('%.17g', st[q + 4]))
      rcall('PEXPIRE', key, ttl_ms(newest + st[q + 2] - now, testing))
    elseif v[2] > 0 and v[3] == 1 then
      rcall('LSET', key, 0, format('%.17g', v[1]))
    end
  end

  -- The line: the head's turn is used once it is granted; a caller refused on rate takes a
  -- ticket at the tail (or keeps the head, when it came before its slot opened).
  local held = 0
  if lined then
    local changed = false
    if lhead and granted > 0 then
      local open = retry
      if blocked ~= 2 then
        -- All granted: when one more job of the last cost would fit.
        open = 0
        local c = tonumber(shared ~= '' and shared or ARGV[7 + 3 * m + granted])
        for q = 0, 5 * m - 5, 5 do
          local o = st[q + 4] + ceil(c * st[q + 2]) - now - st[q + 3]
          if o > open then
            open = o
          end
        end
      end
      lh = lh + 1
      local at = now + open
      if la + ls > at then
        at = la + ls
      end
      la = at
      if lh >= lt then
        lh = nil
      end
      changed = true
    elseif lhead then
      if now + retry > la then
        la = now + retry
      end
      held = ticket
      changed = true
    end
    if blocked == 2 and held == 0 then
      if not line_read then
        local bad_line = read_line()
        if bad_line then
          return bad_line
        end
      end
      if not lh then
        -- A new line: its step from the rule that keeps the refused job waiting longest.
        local c = tonumber(shared ~= '' and shared or ARGV[7 + 3 * m + granted + 1])
        local worst, step = -math.huge, 1
        for q = 0, 5 * m - 5, 5 do
          local cap = st[q + 3]
          local inc = charge(c, st[q + 2], cap)
          local w = st[q + 4] + inc - now - cap
          if w > worst then
            worst = w
            -- turnStep(): three quarters of the burst, no more jobs than fit in 50 ms
            -- (TURN_STEP_MAX_US), at least one
            local per = floor(3 * floor(cap / inc) / 4)
            local most = floor(50000 / inc)
            if most < per then
              per = most
            end
            step = inc * (per > 1 and per or 1)
          end
        end
        lh, lt, la, ls = now, now, now + retry, step
      end
      -- hasRoom(): a ticket only while its turn is at most LINE_AHEAD after the head's;
      -- otherwise none, and the wait is the rules' (a new line always has room).
      local gap = ls + (ls < 800 and floor(ls / 8) or 100)
      if (lt - lh) * gap <= LINE_AHEAD then
        held = lt
        lt = lt + 1
        local turn = la + (held - lh) * gap
        if turn - now > retry then
          retry = turn - now
        end
        changed = true
      end
    end
    if changed then
      if lh then
        local ttl = ceil((la + (lt - lh - 1) * (ls + (ls < 800 and floor(ls / 8) or 100)) + GRACE - now + 1) / 1000)
        rcall('SET', KEYS[5 + m], format('%d:%d:%d:%d', lh, lt, la, ls), 'PX',
          ttl + (testing and 600000 or 0))
      else
        rcall('DEL', KEYS[5 + m])
      end
    end
  end

  local reply = { granted, retry, blocked, 0, now, 0 }
  if granted > 0 then
    -- Spend: write every rule's state with a TTL (whole ms, at least 1; long under the test
    -- clock) at which it would be fresh again (GCRA: one interval later, see gcra_keep()).
    for r = 1, m do
      local q = 5 * (r - 1)
      local s = st[q + 4]
      local us, value = 0, nil
      if st[q + 1] then
        us = s - now + gcra_keep(KEYS[3 + r], r)
        value = format('%d', s)
      elseif st[q + 5] then
        local k = st[q + 5]
        us = (k + 1) * st[q + 2] - now
        value = format('%d', k) .. ':' .. format('%.17g', s)
      end
      if value then
        write_state(KEYS[3 + r], value, us, testing)
      end
    end

    if lease_limit > 0 then
      local expires = now + tonumber(ARGV[5])
      local expires_ms = format('%d.%03d', floor(expires / 1000), expires % 1000)
      local nonce = ARGV[6]
      -- The fencing number only grows: one more than the last, and never below the clock in µs,
      -- so it keeps growing even after the fence key expired or was lost.
      local fence = last_fence
      local at = 6
      for _ = 1, granted do
        fence = fence + 1
        if fence < now then
          fence = now
        end
        local token = nonce .. '.' .. format('%d', fence)
        rcall('ZADD', KEYS[2], expires_ms, token)
        reply[at + 1] = token
        reply[at + 2] = fence
        at = at + 2
      end
      local latest = rcall('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
      local ttl = ttl_ms(floor(tonumber(latest[2]) * 1000 + 0.5) - now, testing)
      rcall('PEXPIRE', KEYS[2], ttl)
      rcall('SET', KEYS[3], format('%d', fence), 'PX', ttl)
      reply[6] = expires
    end
  end
  if recorded then
    reply[#reply + 1] = recorded
  end
  if ticket_arg ~= '' then
    reply[#reply + 1] = held
  end

  if blocked == 3 then
    -- No free slot: hint at the earliest expiry of a held lease (a release usually wakes sooner).
    local first = rcall('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    if first[2] then
      reply[2] = floor(tonumber(first[2]) * 1000 + 0.5) - now
    end
  end
  return reply
end
