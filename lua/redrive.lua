-- redrive.lua: make entities due now with fresh attempts, taking them out of the dead-letter
-- set. The caller names entities that Postgres records as dead-lettered (the durable record),
-- so an entity is made due even when this shard had lost its dead-letter entry.
--
-- KEYS[1]  dead       ZSET  entity -> dead-lettered at (ms)
-- KEYS[2]  dead_info  HASH  entity -> JSON failure record
-- KEYS[3]  due        ZSET  entity -> fire-at (ms)
-- KEYS[4]  pending    HASH  entity -> max-wait anchor (ms, anchor.lua encoding)
-- KEYS[5]  failures   HASH  entity -> JSON failure record of a live entity
-- ARGV[1..] entities
-- Returns: how many of them were in this shard's dead-letter set (all are now due).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local redriven = 0
for _, entity in ipairs(ARGV) do
  if redis.call('ZREM', KEYS[1], entity) == 1 then
    redriven = redriven + 1
  end
  redis.call('HDEL', KEYS[2], entity)
  redis.call('HDEL', KEYS[5], entity)
  local current = tonumber(redis.call('ZSCORE', KEYS[3], entity))
  if not current or now < current then
    redis.call('ZADD', KEYS[3], now, entity)
  end
  redis.call('HSETNX', KEYS[4], entity, encode_anchor(now))
end
return redriven
