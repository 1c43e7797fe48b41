-- index_settle.lua: after claiming (or reaping) shards it read as due, a reader sets each
-- shard's time to what the shard's own script returned: the earliest entry still waiting.
--
-- It raises a shard's time only if the shard has had no report since the reader read it (its
-- report count is the one read): what the shard's script returned, after the read, then holds
-- everything made due sooner. Claims and reaps only ever make a shard's earliest time later,
-- and everything that makes it earlier reports, so a reader whose shard script ran before
-- another reader's can only set a time too early, never too late. Otherwise it only lowers it.
--
-- KEYS[1]  times    ZSET  shard id -> earliest time anything in it may be due (ms)
-- KEYS[2]  reports  HASH  shard id -> how many reports it has had
-- ARGV[1..] triples of (shard id, its report count when read, earliest time still waiting in
--           ms, or -1 for none, or -2 for unknown: the shard was not claimed, keep its time)
-- Returns: the number of shards whose time this reader set.
local shards = {}
for i = 1, #ARGV, 3 do shards[#shards + 1] = ARGV[i] end
if #shards == 0 then return 0 end
local counts = redis.call('HMGET', KEYS[2], unpack(shards))
local set = 0
for n, shard in ipairs(shards) do
  local seen = ARGV[3 * n - 1]
  local at = tonumber(ARGV[3 * n])
  if at ~= -2 then
    if (counts[n] or '0') == seen then
      if at == -1 then
        redis.call('ZREM', KEYS[1], shard)
      else
        redis.call('ZADD', KEYS[1], at, shard)
      end
      set = set + 1
    elseif at >= 0 then
      redis.call('ZADD', KEYS[1], 'LT', at, shard)
    end
  end
end
return set
