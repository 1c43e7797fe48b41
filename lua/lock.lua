-- lock.lua: take an entity's lock for a claim (SET NX PX) and, in the same round trip, read the
-- dedup key of the entity's last applied action: a cache in front of the Postgres constraint,
-- which the evaluation compares with its own decision's key.
--
-- KEYS[1]  lock     STRING  the entity's lock
-- KEYS[2]  applied  STRING  the dedup key of the entity's last applied action (written by ack.lua)
-- ARGV[1]  claim token
-- ARGV[2]  lock time-to-live (ms): the claim's lease
-- Returns: {1, dedup key or nil} if the lock is now the claim's, {0, nil} if another claim
-- holds it (two elements either way: the caller reads a pair).
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, false}
end
return {1, redis.call('GET', KEYS[2])}
