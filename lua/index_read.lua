-- index_read.lua: the shards of an index that may hold something due now, each with how many
-- reports it has had (its report count when read) and its time, and when the next one will be.
--
-- A reader's settle (index_settle.lua) raises a shard's time only if no report came since this
-- read, so any number of readers may read a shard at once. A worker's poll also holds the
-- shards it read (hold > 0): their time moves to now + hold, so that the other processes,
-- woken by the same due time, do not read them too and claim and settle them for nothing. The
-- reader settles each one (or puts its time back, if it did not get to it); a reader that dies
-- first delays them by the hold at most. A report lowers a held time as any other.
--
-- KEYS[1]  times    ZSET  shard id -> earliest time anything in it may be due (ms)
-- KEYS[2]  reports  HASH  shard id -> how many reports it has had
-- ARGV[1]  most shards to return
-- ARGV[2]  hold (ms), 0 for none
-- ARGV[3]  now (unix ms) as the reader carries Redis' clock forward, or '' to ask TIME
-- Returns: { now, next time after now or -1 (also when the limit was reached first), shard id,
--            report count, time, shard id, ... }
local now = tonumber(ARGV[3])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local limit = tonumber(ARGV[1])
local hold = tonumber(ARGV[2])
local out = { now, -1 }
-- The earliest few shards in one command: usually they hold every shard due and the next time.
local peek = math.min(limit, 4)
local first = redis.call('ZRANGE', KEYS[1], 0, peek, 'WITHSCORES')
local due = {}
local known = #first < 2 * (peek + 1)
for i = 1, #first, 2 do
  local at = tonumber(first[i + 1])
  if at > now then
    out[2] = at
    known = true
    break
  end
  if #due == 2 * limit then
    known = true
    break
  end
  due[#due + 1] = first[i]
  due[#due + 1] = first[i + 1]
end
if not known then
  due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
  local next = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if next[2] then out[2] = tonumber(next[2]) end
end
if #due > 0 then
  local shards, held = {}, { 'XX' }
  for i = 1, #due, 2 do
    shards[#shards + 1] = due[i]
    held[#held + 1] = now + hold
    held[#held + 1] = due[i]
  end
  local counts = redis.call('HMGET', KEYS[2], unpack(shards))
  if hold > 0 then redis.call('ZADD', KEYS[1], unpack(held)) end
  for i, shard in ipairs(shards) do
    out[#out + 1] = shard
    out[#out + 1] = counts[i] or '0'
    out[#out + 1] = due[2 * i]
  end
end
return out
