-- retry.lua: give a claim back and fire the entity again after a delay.
--
-- Used on lock contention, a version conflict or a transient failure. Never postpones an
-- entry that is due sooner (an event during the evaluation may have scheduled one). The
-- max-wait anchor goes back to the claimed one (carried at the end of the token), so retries
-- do not stretch max wait.
--
-- KEYS[1]  due       ZSET  entity -> fire-at (ms)
-- KEYS[2]  pending   HASH  entity -> max-wait anchor (ms, anchor.lua encoding)
-- KEYS[3]  inflight  ZSET  entity -> lease deadline (ms)
-- KEYS[4]  claims    HASH  entity -> claim token
-- ARGV[1]  entity
-- ARGV[2]  claim token
-- ARGV[3]  delay (ms)
-- Returns: the entity's fire-at (ms) if re-scheduled, 0 if the claim had been taken over (its
-- new owner decides).
if redis.call('HGET', KEYS[4], ARGV[1]) ~= ARGV[2] then
  return 0
end
local anchor = tonumber(string.match(ARGV[2], ':(%d+)$'))
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fire = now + tonumber(ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local current = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not current or fire < current then
  redis.call('ZADD', KEYS[1], fire, ARGV[1])
else
  fire = current
end
local pending = decode_anchor(redis.call('HGET', KEYS[2], ARGV[1]))
anchor = anchor or now
if not pending or anchor < pending then
  redis.call('HSET', KEYS[2], ARGV[1], encode_anchor(anchor))
end
return fire
