-- repair.lua: re-schedule entities that Postgres says are owed an evaluation but that this
-- shard holds neither due nor in flight (Redis lost them: a restart without persistence, a
-- flush, a failover that dropped writes, or an ingest whose schedule step failed).
--
-- KEYS[1]  due       ZSET  entity -> fire-at (ms)
-- KEYS[2]  pending   HASH  entity -> max-wait anchor (ms, anchor.lua encoding)
-- KEYS[3]  inflight  ZSET  entity -> lease deadline (ms)
-- KEYS[4]  dead      ZSET  entity -> dead-lettered at (ms); these are left alone
-- ARGV[1..] entities owed an evaluation
-- Returns: the number of entities re-scheduled (due now).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local repaired = 0
for _, entity in ipairs(ARGV) do
  if not redis.call('ZSCORE', KEYS[1], entity) and not redis.call('ZSCORE', KEYS[3], entity)
      and not redis.call('ZSCORE', KEYS[4], entity) then
    redis.call('ZADD', KEYS[1], now, entity)
    redis.call('HSETNX', KEYS[2], entity, encode_anchor(now))
    repaired = repaired + 1
  end
end
return repaired
