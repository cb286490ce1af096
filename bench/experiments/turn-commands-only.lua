#!lua
-- Experiment (with script-cold-cost.ts: BASELINE_ACQUIRE=bench/experiments/turn-commands-only.lua):
-- the Redis commands of a turn's acquire.lua call (TIME, the pause, rule-set record, rule and
-- line GETs, the rule's and the line's SET) and a reply of the same shape, without acquire.lua's
-- logic: what a turn's call would cost the server if its logic were free. Not a limiter.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local p = redis.call('GET', KEYS[1])
local rec = redis.call('GET', KEYS[5])
local r = redis.call('GET', KEYS[4])
local l = redis.call('GET', KEYS[6])
redis.call('SET', KEYS[4], string.format('%d', now + 10000), 'PX', '20')
redis.call('SET', KEYS[6], string.format('%d:%d:%d:%d', now, now + 1, now + 2, 375), 'PX', '20')
return { 15, 0, 0, 0, now, 0, 0 }
