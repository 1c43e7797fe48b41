-- reap.lua: return in-flight entities whose lease expired (their worker died or stalled).
--
-- A lease expiry counts as a failed attempt, so an entity that kills its worker every time
-- ends in the dead-letter set. Below the limit the entity is due now, with the max-wait anchor
-- its claim carried (at the end of the token).
--
-- KEYS[1]  due        ZSET  entity -> fire-at (ms)
-- KEYS[2]  pending    HASH  entity -> max-wait anchor (ms, anchor.lua encoding)
-- KEYS[3]  inflight   ZSET  entity -> lease deadline (ms)
-- KEYS[4]  claims     HASH  entity -> claim token
-- KEYS[5]  failures   HASH  entity -> JSON {attempts, first_failure_ms, last_failure_ms, last_error}
-- KEYS[6]  dead       ZSET  entity -> dead-lettered at (ms)
-- KEYS[7]  dead_info  HASH  entity -> JSON failure record with its reason
-- ARGV[1]  most entities to return in this call
-- ARGV[2]  most attempts before dead-lettering
-- Returns: { entities returned to the due set, entities dead-lettered }.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_attempts = tonumber(ARGV[2])
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local returned, dead = 0, 0
for _, entity in ipairs(expired) do
  local token = redis.call('HGET', KEYS[4], entity)
  local anchor = token and tonumber(string.match(token, ':(%d+)$')) or now
  redis.call('ZREM', KEYS[3], entity)
  redis.call('HDEL', KEYS[4], entity)

  local raw = redis.call('HGET', KEYS[5], entity)
  local record = raw and cjson.decode(raw) or { attempts = 0, first_failure_ms = now }
  record.attempts = record.attempts + 1
  record.last_failure_ms = now
  record.last_error = 'lease expired: the worker died or stalled'

  if record.attempts >= max_attempts then
    record.reason = 'attempts_exhausted'
    redis.call('ZREM', KEYS[1], entity)
    redis.call('HDEL', KEYS[2], entity)
    redis.call('HDEL', KEYS[5], entity)
    redis.call('ZADD', KEYS[6], now, entity)
    redis.call('HSET', KEYS[7], entity, cjson.encode(record))
    dead = dead + 1
  else
    redis.call('HSET', KEYS[5], entity, cjson.encode(record))
    local current = tonumber(redis.call('ZSCORE', KEYS[1], entity))
    if not current or now < current then
      redis.call('ZADD', KEYS[1], now, entity)
    end
    local pending = decode_anchor(redis.call('HGET', KEYS[2], entity))
    if not pending or anchor < pending then
      redis.call('HSET', KEYS[2], entity, encode_anchor(anchor))
    end
    returned = returned + 1
  end
end
return { returned, dead }
