-- renew.lua: extend a running evaluation's lease and its entity lock together.
--
-- KEYS[1]  inflight  ZSET    entity -> lease deadline (ms)
-- KEYS[2]  claims    HASH    entity -> claim token
-- KEYS[3]  lock      STRING  the entity's lock, holding the claim token
-- ARGV[1]  entity
-- ARGV[2]  claim token
-- ARGV[3]  new lease and lock time-to-live (ms)
-- Returns: 1 if both were still ours and are extended, 0 otherwise.
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] or redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[3]))
return 1
