-- unlock.lua: release an entity lock only if it still holds our token (compare-and-delete).
--
-- KEYS[1]  lock  STRING  the entity's lock
-- ARGV[1]  token
-- Returns: 1 if released, 0 if the lock had expired or belongs to someone else.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
