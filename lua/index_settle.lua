-- index_settle.lua: after claiming (or reaping) shards it read as due, a reader sets each
-- shard's time to what the shard's own script returned: the earliest entry still waiting.
--
-- Only the shard's last reader raises its time, and never past a time reported since it
-- read it (an event scheduled after its claim). Any other reader only lowers it.
--
-- KEYS[1]  times     ZSET  shard id -> earliest time anything in it may be due (ms)
-- KEYS[2]  readers   HASH  shard id -> token of the worker that read it as due
-- KEYS[3]  reported  HASH  shard id -> earliest time reported since it was read (ms)
-- ARGV[1]  reader token
-- ARGV[2..] pairs of (shard id, earliest time still waiting in ms, or -1 for none, or -2 for
--           unknown: the shard was not claimed, keep its time)
-- Returns: the number of shards whose time this reader set.
local set = 0
for i = 2, #ARGV, 2 do
  local shard = ARGV[i]
  local at = tonumber(ARGV[i + 1])
  if redis.call('HGET', KEYS[2], shard) == ARGV[1] then
    redis.call('HDEL', KEYS[2], shard)
    local seen = tonumber(redis.call('HGET', KEYS[3], shard))
    redis.call('HDEL', KEYS[3], shard)
    if at ~= -2 then
      if seen and (at == -1 or seen < at) then at = seen end
      if at == -1 then
        redis.call('ZREM', KEYS[1], shard)
      else
        redis.call('ZADD', KEYS[1], at, shard)
      end
      set = set + 1
    end
  elseif at >= 0 then
    local current = tonumber(redis.call('ZSCORE', KEYS[1], shard))
    if not current or at < current then
      redis.call('ZADD', KEYS[1], at, shard)
    end
  end
end
return set
