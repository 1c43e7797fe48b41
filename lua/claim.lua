-- claim.lua: atomically move up to N due entities of one shard into the in-flight set.
--
-- Each claimed entity gets a lease (in-flight score = lease deadline) and a claim token; only
-- the holder of the token may ack, renew or retry it. The token ends with the entity's max-wait
-- anchor, so that retry and reap can restore it if this evaluation does not complete. An entity
-- still in flight under an earlier claim is not claimed twice: it is pushed back by the busy
-- delay instead, and keeps its anchor. Bounded by LIMIT, never an unbounded range.
--
-- KEYS[1]  due       ZSET  entity -> fire-at (ms)
-- KEYS[2]  pending   HASH  entity -> max-wait anchor (ms, anchor.lua encoding)
-- KEYS[3]  inflight  ZSET  entity -> lease deadline (ms)
-- KEYS[4]  claims    HASH  entity -> claim token
-- ARGV[1]  most entities to claim
-- ARGV[2]  lease (ms)
-- ARGV[3]  token prefix, unique per call; tokens are "<prefix>:<n>:<anchor ms>"
-- ARGV[4]  busy delay (ms) for entities still in flight
-- Returns: { now, next fire-at or -1, busy count, 1 if the claims' lease deadline is earlier
--            than every lease the shard held before (the lease index must be told) else 0,
--            entity, token, fire-at, entity, token, fire-at, ... }
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
local busy_delay = tonumber(ARGV[4])

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local out = { now, -1, 0, 0 }
local busy = 0
local claimed = 0
local lease_head = nil
for i = 1, #due, 2 do
  local entity = due[i]
  if redis.call('ZSCORE', KEYS[3], entity) then
    redis.call('ZADD', KEYS[1], now + busy_delay, entity)
    busy = busy + 1
  else
    local anchor = decode_anchor(redis.call('HGET', KEYS[2], entity)) or tonumber(due[i + 1])
    local token = ARGV[3] .. ':' .. ((i + 1) / 2) .. ':' .. string.format('%.0f', anchor)
    redis.call('ZREM', KEYS[1], entity)
    redis.call('HDEL', KEYS[2], entity)
    if claimed == 0 then
      lease_head = tonumber(redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2])
    end
    redis.call('ZADD', KEYS[3], now + lease, entity)
    redis.call('HSET', KEYS[4], entity, token)
    claimed = claimed + 1
    out[#out + 1] = entity
    out[#out + 1] = token
    out[#out + 1] = due[i + 1]
  end
end

local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] then out[2] = tonumber(head[2]) end
out[3] = busy
if claimed > 0 and (not lease_head or now + lease < lease_head) then out[4] = 1 end
return out
