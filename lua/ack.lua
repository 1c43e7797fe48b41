-- ack.lua: finish a claim. Removes the in-flight entry only while the token still matches,
-- and releases the entity lock if it still holds our token (one round trip instead of two).
--
-- The due set is not touched: an event that arrived during the evaluation re-scheduled the
-- entity there, and that entry must still fire.
--
-- KEYS[1]  inflight  ZSET  entity -> lease deadline (ms)
-- KEYS[2]  claims    HASH  entity -> claim token
-- KEYS[3]  failures  HASH  entity -> failure record (cleared: the entity succeeded)
-- KEYS[4]  lock      STRING  the entity's lock
-- ARGV[1]  entity
-- ARGV[2]  claim token
-- Returns: 1 if the claim was ours and is now finished, 0 if it had been taken over.
if redis.call('GET', KEYS[4]) == ARGV[2] then
  redis.call('DEL', KEYS[4])
end
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
