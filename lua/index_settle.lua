-- index_settle.lua: after claiming (or reaping) shards it read as due, a reader sets each
-- shard's time to what the shard's own script returned: the earliest entry still waiting.
--
-- It raises a shard's time only if the shard has had no report since the reader read it (its
-- report count is the one read): what the shard's script returned, after the read, then holds
-- everything made due sooner. Claims and reaps only ever make a shard's earliest time later,
-- and everything that makes it earlier reports, so a reader whose shard script ran before
-- another reader's can only set a time too early, never too late. Otherwise it only lowers it.
-- A shard the reader held and did not get to is given back the time it was read at.
--
-- A worker's round also tells the lease index of the claims whose lease ends first in their
-- shard, in the same call (index_report.lua's ZADD LT and count, without a wake-up).
--
-- KEYS[1]  times    ZSET  shard id -> earliest time anything in it may be due (ms)
-- KEYS[2]  reports  HASH  shard id -> how many reports it has had
-- KEYS[3]  lease index times, KEYS[4] its reports (only with lease reports)
-- ARGV[1]  how many shards are settled (n)
-- ARGV[2..3n+1] triples of (shard id, its report count when read, earliest time still waiting
--           in ms, or -1 for none, or -2 for unknown: the shard was not claimed, keep its time)
-- ARGV[3n+2..] pairs of (shard id, lease deadline in ms) for the lease index
-- Returns: the number of shards whose time this reader set.
local n = tonumber(ARGV[1])
local shards = {}
for i = 1, n do shards[i] = ARGV[3 * i - 1] end
local set = 0
if n > 0 then
  local counts = redis.call('HMGET', KEYS[2], unpack(shards))
  for i, shard in ipairs(shards) do
    local seen = ARGV[3 * i]
    local at = tonumber(ARGV[3 * i + 1])
    if at ~= -2 then
      if (counts[i] or '0') == seen then
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
end
for i = 3 * n + 2, #ARGV, 2 do
  redis.call('ZADD', KEYS[3], 'LT', tonumber(ARGV[i + 1]), ARGV[i])
  redis.call('HINCRBY', KEYS[4], ARGV[i], 1)
end
return set
