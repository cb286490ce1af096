#!lua
--[[
acquire.lua: one admission for a batch of queued jobs of one valve id (see docs/architecture.md,
"The arithmetic"). Checks the shared pause (a paused id grants nothing, but a rule change's
conversion is still done: it only writes state), then grants the longest prefix of jobs that fits
every rule (each job checked against the state as updated by the jobs granted before it) and,
when leases are wanted, a free global-concurrency slot; spends the prefix on every rule.

Long on purpose: admission is one atomic step (pause, leases, every rule, spends, rule-set record
and conversion in one script), so it cannot be split into scripts called one after another.

KEYS[1]      <prefix>:{<id>}:pause   string, pausedUntil (epoch ms, 3 decimals)
KEYS[2]      <prefix>:{<id>}:leases  sorted set, lease token -> expiresAt (epoch ms)
KEYS[3]      <prefix>:{<id>}:fence   string, the last fencing number
KEYS[3+r]    <prefix>:{<id>}:r:<digest of rule r>, r = 1..m
                                     string, GCRA tat (µs) or fixed window "<k>:<count>";
                                     sliding window: list [sum, t1, c1, t2, c2, ...], the
                                     live grants (t µs, cost) oldest first, sum = their costs
                                     (during a rule change, the rules 1..m are the request's
                                     rules and then the previous rules that are not among them)
KEYS[4+m]    <prefix>:{<id>}:rules   string, the id's recorded rule set "<until µs>:<digests joined by ','>"
KEYS[5+m]    <prefix>:{<id>}:line:<digest of rule 1>  string, the line of turns of this rule set "<head>:<tail>:<turn µs>:<step µs>"
                                     (src/stores/turns.ts: tickets head..tail-1 wait, the head's turn
                                     is at <turn>, each next one <step> later)
ARGV[1]      "" (use Redis TIME), or the time in µs (test-only virtual clock)
ARGV[2]      n, the number of jobs
ARGV[3]      m, the number of rules
ARGV[4]      lease limit, 0 when no leases are wanted
ARGV[5]      lease ttl (µs)
ARGV[6]      lease token nonce (random per call)
ARGV[7+3(r-1)..9+3(r-1)]  rule r: "g", emissionUs, burst   or   "w", intervalUs, limit
                          or   "s", intervalUs, limit (sliding window)
ARGV[7+3m]   the cost of every job when all n are equal (one cost, n jobs: the fast path,
             computed arithmetically), or "" when they differ
ARGV[8+3m..7+3m+n]        when ARGV[7+3m] is "": the cost of each job, in queue order
then, from t = 8+3m (shared cost) or 8+3m+n (costs each):
ARGV[t]      "-", or "=" and the rule set to record (digests joined by ',')
ARGV[t+1]    the record's TTL (whole ms)
ARGV[t+2]    "" (no part in the line), or the caller's ticket ("0" for none)
ARGV[t+3]    "" or, for a rule change's conversion, one role per rule: "n" new (converted),
             "b" new and previous (a source), "o" previous only (a source)
ARGV[t+4+3(r-1)], ARGV[t+5+3(r-1)], ARGV[t+6+3(r-1)]  with roles: rule r's intervalUs, its
             limit, and for a source "" (its state has counted every grant) or the server time in
             µs from which it has (its own conversion; a larger number than any time when not
             known): a source is taken for a new rule only when that time lies before the new
             rule's window start (src/rules/convert.ts)

Flags (#!lua, no allow-oom): under maxmemory with noeviction the server refuses the whole
call with OOM before it runs, so nothing is ever half-written.
Errors: "VALVE_CORRUPT_STATE <key> ..." when a key holds what valve never writes (a pause,
tat, window count or fence that is malformed, negative, non-finite or beyond what the rule
allows, or a lease expiring further ahead than any ttl): valve refuses to guess.

Reply: { granted, retryAfterUs, blocked, pausedUntilUs, nowUs, leaseExpiresUs,
         token_1, fence_1, ..., token_granted, fence_granted, recorded, turn }
  recorded: the rule set recorded before, when it differs from ARGV[t] (absent otherwise)
  turn: with ARGV[t+2] ~= "", the ticket the caller holds after the call (0 for none)
  blocked: 0 whole batch granted, 1 pause, 2 rate, 3 concurrency
  retryAfterUs: µs until the first refused job could fit (0 when all granted)
  pausedUntilUs: the active pause's end, 0 when not paused
  leaseExpiresUs: expiry of the leases granted in this call, 0 without leases
]]

if redis.replicate_commands then
  redis.replicate_commands()
end

-- @include acquire-one

return acquire_one(KEYS, ARGV, nil)
