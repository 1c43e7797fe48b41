-- fail.lua: record a failed attempt of a claim; retry it with backoff, or dead-letter it.
--
-- An attempt that fails for a reason of the entity's own (a panic, a timeout, a query error)
-- counts. Below the limit the entity is due again after an exponential backoff with full jitter
-- (a random share, from the caller, of min(cap, base * 2^(attempts - 1))) and keeps its
-- max-wait anchor (carried at the end of the token). At the limit, or for a fatal failure, it
-- moves to the dead-letter set with its reason, last error, attempt count and failure times,
-- and leaves the due set: it is evaluated again only when redriven.
--
-- The attempts go on from the greater of this shard's failure record and the caller's floor
-- (the count Postgres holds, so a Redis that lost its record does not start the count over).
-- The caller writes the record this returns to Postgres.
--
-- KEYS[1]  due        ZSET  entity -> fire-at (ms)
-- KEYS[2]  pending    HASH  entity -> max-wait anchor (ms, anchor.lua encoding)
-- KEYS[3]  inflight   ZSET  entity -> lease deadline (ms)
-- KEYS[4]  claims     HASH  entity -> claim token
-- KEYS[5]  failures   HASH  entity -> JSON {attempts, first_failure_ms, last_failure_ms, last_error}
-- KEYS[6]  dead       ZSET  entity -> dead-lettered at (ms)
-- KEYS[7]  dead_info  HASH  entity -> JSON {reason, last_error, attempts, first_failure_ms, last_failure_ms}
-- ARGV[1]  entity
-- ARGV[2]  claim token
-- ARGV[3]  error message
-- ARGV[4]  most attempts before dead-lettering
-- ARGV[5]  backoff base (ms)
-- ARGV[6]  backoff cap (ms)
-- ARGV[7]  "1" if the failure is fatal (dead-letter now), else "0"
-- ARGV[8]  jitter: a random number in [0, 1)
-- ARGV[9]  floor: attempts already recorded in Postgres for this failure streak (0 if none)
-- ARGV[10] floor: the first failure time recorded with them (ms; 0 if none)
-- Returns: { 1 retried | 2 dead-lettered, the new failure record (JSON, with its reason when
--          dead-lettered) }, or { 0 } if the claim had been taken over (nothing changed).
local entity = ARGV[1]
if redis.call('HGET', KEYS[4], entity) ~= ARGV[2] then
  return { 0 }
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local anchor = tonumber(string.match(ARGV[2], ':(%d+)$')) or now

local raw = redis.call('HGET', KEYS[5], entity)
local record = raw and cjson.decode(raw) or { attempts = 0, first_failure_ms = now }
local floor = tonumber(ARGV[9]) or 0
if floor > record.attempts then
  record.attempts = floor
  local first = tonumber(ARGV[10]) or 0
  if first > 0 and first < record.first_failure_ms then record.first_failure_ms = first end
end
record.attempts = record.attempts + 1
record.last_failure_ms = now
record.last_error = ARGV[3]
redis.call('ZREM', KEYS[3], entity)
redis.call('HDEL', KEYS[4], entity)

local fatal = ARGV[7] == '1'
if fatal or record.attempts >= tonumber(ARGV[4]) then
  record.reason = fatal and 'fatal' or 'attempts_exhausted'
  redis.call('ZREM', KEYS[1], entity)
  redis.call('HDEL', KEYS[2], entity)
  redis.call('HDEL', KEYS[5], entity)
  redis.call('ZADD', KEYS[6], now, entity)
  local encoded = cjson.encode(record)
  redis.call('HSET', KEYS[7], entity, encoded)
  return { 2, encoded }
end

local backoff = math.min(tonumber(ARGV[6]), tonumber(ARGV[5]) * 2 ^ (record.attempts - 1))
local fire = now + math.floor(tonumber(ARGV[8]) * backoff)
local current = tonumber(redis.call('ZSCORE', KEYS[1], entity))
if not current or fire < current then
  redis.call('ZADD', KEYS[1], fire, entity)
end
local pending = decode_anchor(redis.call('HGET', KEYS[2], entity))
if not pending or anchor < pending then
  redis.call('HSET', KEYS[2], entity, encode_anchor(anchor))
end
local encoded = cjson.encode(record)
redis.call('HSET', KEYS[5], entity, encoded)
return { 1, encoded }
