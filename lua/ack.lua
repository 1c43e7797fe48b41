-- ack.lua: finish a claim. Removes the in-flight entry only while the token still matches,
-- releases the entity lock if it still holds our token, and remembers the dedup key of the
-- action the evaluation applied (or found applied), all in one round trip.
--
-- The due set is not touched: an event that arrived during the evaluation re-scheduled the
-- entity there, and that entry must still fire.
--
-- KEYS[1]  inflight  ZSET    entity -> lease deadline (ms)
-- KEYS[2]  claims    HASH    entity -> claim token
-- KEYS[3]  failures  HASH    entity -> failure record (cleared: the entity succeeded)
-- KEYS[4]  lock      STRING  the entity's lock
-- KEYS[5]  applied   STRING  the dedup key of the entity's last applied action (read by lock.lua)
-- ARGV[1]  entity
-- ARGV[2]  claim token
-- ARGV[3]  the dedup key of the action applied now or before, or '' for none
-- ARGV[4]  how long to remember it (s)
-- Returns: 1 if the claim was ours and is now finished, 0 if it had been taken over (the dedup
-- key is remembered either way: Postgres committed the action).
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[5], ARGV[3], 'EX', ARGV[4])
end
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
