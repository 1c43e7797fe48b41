-- index_report.lua: tell a shard index that shards hold something due (or a lease that
-- expires) at a time, after the shard's own script set it.
--
-- A shard's score only ever goes down here, so it is never later than the truth; a reader of
-- the shard raises it again (index_settle.lua). Each report also counts one more report for
-- the shard: a reader that read the shard before this report then only lowers its time, since
-- what it learned from the shard may not include what this report is about.
-- When the index's earliest time moves earlier, waiting workers are told on the wake channel.
--
-- KEYS[1]  times    ZSET  shard id -> earliest time anything in it may be due (ms)
-- KEYS[2]  reports  HASH  shard id -> how many reports it has had
-- ARGV[1]  wake channel ('' for none)
-- ARGV[2..] pairs of (shard id, time in ms)
-- Returns: 1 if the index's earliest time moved earlier, else 0.
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local before = tonumber(head[2])
local earliest = nil
for i = 2, #ARGV, 2 do
  local shard = ARGV[i]
  local at = tonumber(ARGV[i + 1])
  -- LT: only a lower time replaces the shard's (one command instead of a read and a write).
  redis.call('ZADD', KEYS[1], 'LT', at, shard)
  redis.call('HINCRBY', KEYS[2], shard, 1)
  if not earliest or at < earliest then earliest = at end
end
if earliest and (not before or earliest < before) then
  if ARGV[1] ~= '' then
    redis.call('PUBLISH', ARGV[1], earliest)
  end
  return 1
end
return 0
