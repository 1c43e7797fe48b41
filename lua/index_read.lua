-- index_read.lua: the shards of an index that may hold something due now, each taken by
-- this reader (its token), and when the next one will be.
--
-- A later reader of the same shard replaces the token: only the last reader's settle raises
-- the shard's time; earlier ones can only lower it.
--
-- KEYS[1]  times     ZSET  shard id -> earliest time anything in it may be due (ms)
-- KEYS[2]  readers   HASH  shard id -> token of the worker that read it as due
-- KEYS[3]  reported  HASH  shard id -> earliest time reported since it was read (ms)
-- ARGV[1]  most shards to return
-- ARGV[2]  reader token
-- Returns: { now, next time after now or -1, shard id, shard id, ... }
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local out = { now, -1 }
for _, shard in ipairs(due) do
  redis.call('HSET', KEYS[2], shard, ARGV[2])
  redis.call('HDEL', KEYS[3], shard)
  out[#out + 1] = shard
end
local next = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if next[2] then out[2] = tonumber(next[2]) end
return out
