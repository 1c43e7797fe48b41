-- ack.lua: finish a claim. Removes the in-flight entry only while the token still matches.
--
-- The due set is not touched: an event that arrived during the evaluation re-scheduled the
-- entity there, and that entry must still fire.
--
-- KEYS[1]  inflight  ZSET  entity -> lease deadline (ms)
-- KEYS[2]  claims    HASH  entity -> claim token
-- KEYS[3]  failures  HASH  entity -> failure record (cleared: the entity succeeded)
-- ARGV[1]  entity
-- ARGV[2]  claim token
-- Returns: 1 if the claim was ours and is now finished, 0 if it had been taken over.
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
