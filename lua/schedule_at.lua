-- schedule_at.lua: schedule entities at given times: the end of a timed action (the entity is
-- evaluated then, and the evaluation restores it). Never postpones an entry due sooner (an
-- event's evaluation comes first, and the entity is scheduled again at the timer's end after
-- it). Writes no max-wait anchor: the entry is not an event's, so an event that comes before
-- it is debounced as usual (schedule.lua). A dead-lettered entity is left alone (a redrive
-- evaluates it; the repair sweep finds the timer again after that), and so, when ARGV[1] is
-- "1", is one in flight (its evaluation restores it, or schedules the timer's end again; the
-- evaluation itself schedules with "0").
--
-- KEYS[1]  due      ZSET  entity -> fire-at (unix ms)
-- KEYS[2]  dead     ZSET  entity -> dead-lettered at (ms)
-- KEYS[3]  inflight ZSET  entity -> lease deadline (ms)
-- ARGV[1]  "1": leave the entities in flight alone; "0": schedule them too
-- ARGV[2..] pairs of (entity, fire-at (unix ms))
-- Returns: { earliest fire-at set by this call or -1, 1 if it is earlier than anything the
--            shard held due before (the due index must be told) else 0, how many entries were
--            added or moved earlier }
local before = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2])
local earliest = nil
local set = 0
local skip_in_flight = ARGV[1] == '1'
for i = 2, #ARGV, 2 do
  local entity = ARGV[i]
  local fire = tonumber(ARGV[i + 1])
  if not redis.call('ZSCORE', KEYS[2], entity)
      and not (skip_in_flight and redis.call('ZSCORE', KEYS[3], entity)) then
    local current = tonumber(redis.call('ZSCORE', KEYS[1], entity))
    if current and current <= fire then
      fire = current
    else
      redis.call('ZADD', KEYS[1], fire, entity)
      set = set + 1
    end
    if not earliest or fire < earliest then earliest = fire end
  end
end
local out = { -1, 0, set }
if earliest then
  out[1] = earliest
  if not before or earliest < before then out[2] = 1 end
end
return out
