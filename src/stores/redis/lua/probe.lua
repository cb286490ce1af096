#!lua flags=allow-oom
--[[
probe.lua: publishes probe:<nonce> on one valve id's wake channel, so that a subscriber can
tell that the server really delivers that channel to it (a client may report a subscription
that the server never recorded). Other subscribers ignore the message. Writes nothing.

KEYS[1]  <prefix>:{<id>}:pause   never read: it routes the call to the id's cluster node
ARGV[1]  the wake channel, <prefix>:{<id>}:wake
ARGV[2]  publish mode: p PUBLISH, s SPUBLISH
ARGV[3]  the message, probe:<nonce>

Flags: allow-oom, it writes nothing.

Reply: the number of subscribers that received it
]]

if ARGV[2] == 's' then
  return redis.call('SPUBLISH', ARGV[1], ARGV[3])
end
return redis.call('PUBLISH', ARGV[1], ARGV[3])
