-- expiring.lua: in-flight entities of one shard whose lease has expired, or will within a
-- margin, by this Redis' clock (the clock reap.lua expires leases by, and claim.lua set them
-- by): those the next reap may count an attempt for, so that the caller reads their failure
-- counts from Postgres first. A process clock would miss them when it runs behind Redis'.
--
-- KEYS[1]  inflight  ZSET  entity -> lease deadline (ms)
-- ARGV[1]  margin (ms)
-- ARGV[2]  most entities to return
-- Returns: the entities, earliest deadline first.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now + tonumber(ARGV[1]),
  'LIMIT', 0, tonumber(ARGV[2]))
