-- forget_dead.lua: take dead letters out of one shard's dead set, with their failure records:
-- a layout being drained, whose dead letters were moved to the current layout or redriven.
--
-- An entity dead-lettered again since the caller read it (a later time) stays.
--
-- KEYS[1]  dead       ZSET  entity -> dead-lettered at (ms)
-- KEYS[2]  dead_info  HASH  entity -> JSON failure record
-- KEYS[3]  failures   HASH  entity -> JSON failure record of a live entity
-- ARGV[1..] pairs of (entity, dead-lettered at in ms as read, or -1 for whenever)
-- Returns: how many left the dead set.
local forgotten = 0
for i = 1, #ARGV, 2 do
  local entity = ARGV[i]
  local at = tonumber(ARGV[i + 1])
  local current = tonumber(redis.call('ZSCORE', KEYS[1], entity))
  if current and (at == -1 or current == at) then
    redis.call('ZREM', KEYS[1], entity)
    redis.call('HDEL', KEYS[2], entity)
    redis.call('HDEL', KEYS[3], entity)
    forgotten = forgotten + 1
  end
end
return forgotten
