-- schedule.lua: debounce entities by pushing their evaluation into the future.
--
-- A normal event slides the entity's fire-at to now + window, but never past the first
-- pending event + max wait, so a steady stream cannot postpone evaluation forever. In fixed
-- mode the first event's fire-at stands (an entry without a max-wait anchor is no event's: a
-- timed action's end, schedule_at.lua, and an event is debounced as if it were not there). A critical event fires now. An entity that is
-- already due is never postponed. A dead-lettered entity is not scheduled (its events are
-- recorded in Postgres; a redrive evaluates them). "Now" is this server's TIME, so callers'
-- clocks do not matter.
--
-- KEYS[1]  due      ZSET  entity -> fire-at (unix ms)
-- KEYS[2]  pending  HASH  entity -> time of the first event not yet claimed (max-wait anchor, anchor.lua encoding)
-- KEYS[3]  dead     ZSET  entity -> dead-lettered at (ms)
-- KEYS[4]  inflight ZSET  entity -> lease deadline (ms)
-- ARGV[1]  window (ms)
-- ARGV[2]  max wait (ms)
-- ARGV[3]  mode: "sliding" or "fixed"
-- ARGV[4]  "1" to schedule only the entities this shard already holds (due, pending, in
--          flight or dead): a shard of a layout being drained after the shard count changed
-- ARGV[5..] pairs of (entity, critical "1" | "0")
-- Returns: { earliest fire-at (ms) set by this call or -1, 1 if it is earlier than anything the
--            shard held due before (the shard's head moved earlier: the due index must be told)
--            else 0, entity not held, entity not held, ... }
--
-- When the head did not move earlier, the due index needs no report: its time for the shard is
-- never later than the shard's head was, and every fire-at set here is at or after that head.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local max_wait = tonumber(ARGV[2])
local fixed = ARGV[3] == 'fixed'
local held_only = ARGV[4] == '1'
local earliest = nil
local out = { -1, 0 }
local before = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2])

for i = 5, #ARGV, 2 do
  local entity = ARGV[i]
  local critical = ARGV[i + 1] == '1'
  if held_only and not redis.call('ZSCORE', KEYS[1], entity) and redis.call('HEXISTS', KEYS[2], entity) == 0
      and not redis.call('ZSCORE', KEYS[4], entity) and not redis.call('ZSCORE', KEYS[3], entity) then
    out[#out + 1] = entity
  elseif not redis.call('ZSCORE', KEYS[3], entity) then
    local first = decode_anchor(redis.call('HGET', KEYS[2], entity))
    local anchored = first ~= nil
    if not first then
      first = now
      redis.call('HSET', KEYS[2], entity, encode_anchor(now))
    end
    local current = tonumber(redis.call('ZSCORE', KEYS[1], entity))
    local fire
    if critical then
      fire = now
      if current and current < fire then fire = current end
    elseif current and (current <= now or (fixed and anchored)) then
      fire = current
    else
      fire = math.min(now + window, first + max_wait)
    end
    if fire ~= current then
      redis.call('ZADD', KEYS[1], fire, entity)
    end
    if not earliest or fire < earliest then earliest = fire end
  end
end

if earliest then
  out[1] = earliest
  if not before or earliest < before then out[2] = 1 end
end
return out
