#!lua flags=allow-oom
--[[
resume.lua: deletes the shared pause of one valve id and publishes "resume" on its wake channel
(always, so that a process still caching a pause that was lost or expired wakes too).

KEYS[1]  <prefix>:{<id>}:pause   string, pausedUntil (epoch ms, 3 decimals)
KEYS[2]  <prefix>:{<id>}:pause-by  string, what wrote the pause (deleted too)
ARGV[1]  the wake channel, <prefix>:{<id>}:wake
ARGV[2]  publish mode: "p" PUBLISH, "s" SPUBLISH, "" none

Flags: allow-oom, it only deletes (which frees memory), so it runs even when Redis is full.

Reply: 1 when a pause was deleted, else 0
]]

-- @include common

local deleted = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
notify(ARGV[2], ARGV[1], 'resume')
return deleted
