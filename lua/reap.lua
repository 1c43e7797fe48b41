-- reap.lua: return in-flight entities whose lease expired (their worker died or stalled).
--
-- A lease expiry counts as a failed attempt, so an entity that kills its worker every time
-- ends in the dead-letter set. Below the limit the entity is due now, with the max-wait anchor
-- its claim carried (at the end of the token).
--
-- As in fail.lua, attempts go on from the greater of the shard's failure record and the
-- caller's floor for the entity (the count Postgres holds); the caller writes the records this
-- returns to Postgres.
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
-- ARGV[3..] triples (entity, floor attempts, floor first failure ms) for entities whose lease
--           may have expired; an entity not listed has no floor
-- Returns: { entities returned to the due set, entities dead-lettered, then for each of them
--          the entity and its new failure record (JSON, with its reason when dead-lettered) }.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_attempts = tonumber(ARGV[2])
local floors = {}
for i = 3, #ARGV, 3 do
  floors[ARGV[i]] = { tonumber(ARGV[i + 1]) or 0, tonumber(ARGV[i + 2]) or 0 }
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local returned, dead = 0, 0
local records = {}
for _, entity in ipairs(expired) do
  local token = redis.call('HGET', KEYS[4], entity)
  local anchor = token and tonumber(string.match(token, ':(%d+)$')) or now
  redis.call('ZREM', KEYS[3], entity)
  redis.call('HDEL', KEYS[4], entity)

  local raw = redis.call('HGET', KEYS[5], entity)
  local record = raw and cjson.decode(raw) or { attempts = 0, first_failure_ms = now }
  local floor = floors[entity]
  if floor and floor[1] > record.attempts then
    record.attempts = floor[1]
    if floor[2] > 0 and floor[2] < record.first_failure_ms then
      record.first_failure_ms = floor[2]
    end
  end
  record.attempts = record.attempts + 1
  record.last_failure_ms = now
  record.last_error = 'lease expired: the worker died or stalled'

  if record.attempts >= max_attempts then
    record.reason = 'attempts_exhausted'
    redis.call('ZREM', KEYS[1], entity)
    redis.call('HDEL', KEYS[2], entity)
    redis.call('HDEL', KEYS[5], entity)
    redis.call('ZADD', KEYS[6], now, entity)
    local encoded = cjson.encode(record)
    redis.call('HSET', KEYS[7], entity, encoded)
    records[#records + 1] = entity
    records[#records + 1] = encoded
    dead = dead + 1
  else
    local encoded = cjson.encode(record)
    redis.call('HSET', KEYS[5], entity, encoded)
    records[#records + 1] = entity
    records[#records + 1] = encoded
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
local reply = { returned, dead }
for _, value in ipairs(records) do reply[#reply + 1] = value end
return reply
