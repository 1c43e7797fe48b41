-- reap.lua: return in-flight entities whose lease expired (their worker died) to the due set,
-- due now, with the max-wait anchor their claim carried.
--
-- KEYS[1]  due       ZSET  entity -> fire-at (ms)
-- KEYS[2]  pending   HASH  entity -> max-wait anchor (ms)
-- KEYS[3]  inflight  ZSET  entity -> lease deadline (ms)
-- KEYS[4]  claims    HASH  entity -> claim token
-- ARGV[1]  most entities to return in this call
-- Returns: the number of entities returned to the due set.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, entity in ipairs(expired) do
  local token = redis.call('HGET', KEYS[4], entity)
  local anchor = token and tonumber(string.match(token, ':(%d+)$')) or now
  redis.call('ZREM', KEYS[3], entity)
  redis.call('HDEL', KEYS[4], entity)
  local current = tonumber(redis.call('ZSCORE', KEYS[1], entity))
  if not current or now < current then
    redis.call('ZADD', KEYS[1], now, entity)
  end
  local pending = tonumber(redis.call('HGET', KEYS[2], entity))
  if not pending or anchor < pending then
    redis.call('HSET', KEYS[2], entity, anchor)
  end
end
return #expired
