-- index_read.lua: the shards of an index that may hold something due now, each with how many
-- reports it has had (its report count when read), and when the next one will be.
--
-- Reading writes nothing: a reader's settle (index_settle.lua) raises a shard's time only if
-- no report came since this read, so any number of readers may read a shard at once.
--
-- KEYS[1]  times    ZSET  shard id -> earliest time anything in it may be due (ms)
-- KEYS[2]  reports  HASH  shard id -> how many reports it has had
-- ARGV[1]  most shards to return
-- Returns: { now, next time after now or -1, shard id, report count, shard id, report count, ... }
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local out = { now, -1 }
if #due > 0 then
  local counts = redis.call('HMGET', KEYS[2], unpack(due))
  for i, shard in ipairs(due) do
    out[#out + 1] = shard
    out[#out + 1] = counts[i] or '0'
  end
end
local next = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if next[2] then out[2] = tonumber(next[2]) end
return out
