-- index_report.lua: tell a shard index that shards hold something due (or a lease that
-- expires) at a time, after the shard's own script set it.
--
-- A shard's score only ever goes down here, so it is never later than the truth; the worker
-- that reads the shard raises it again (index_settle.lua). While a reader holds a shard, the
-- earliest time reported is kept for its settle, which would otherwise not know of it.
-- When the index's earliest time moves earlier, waiting workers are told on the wake channel.
--
-- KEYS[1]  times     ZSET  shard id -> earliest time anything in it may be due (ms)
-- KEYS[2]  readers   HASH  shard id -> token of the worker that read it as due
-- KEYS[3]  reported  HASH  shard id -> earliest time reported since it was read (ms)
-- ARGV[1]  wake channel ('' for none)
-- ARGV[2..] pairs of (shard id, time in ms)
-- Returns: 1 if the index's earliest time moved earlier, else 0.
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local before = tonumber(head[2])
local earliest = nil
for i = 2, #ARGV, 2 do
  local shard = ARGV[i]
  local at = tonumber(ARGV[i + 1])
  local current = tonumber(redis.call('ZSCORE', KEYS[1], shard))
  if not current or at < current then
    redis.call('ZADD', KEYS[1], at, shard)
  end
  if redis.call('HEXISTS', KEYS[2], shard) == 1 then
    local seen = tonumber(redis.call('HGET', KEYS[3], shard))
    if not seen or at < seen then
      redis.call('HSET', KEYS[3], shard, at)
    end
  end
  if not earliest or at < earliest then earliest = at end
end
if earliest and (not before or earliest < before) then
  if ARGV[1] ~= '' then
    redis.call('PUBLISH', ARGV[1], earliest)
  end
  return 1
end
return 0
