-- anchor.lua: prepended to every script that reads or writes the pending hash.
--
-- A max-wait anchor (unix ms) is stored as 6 raw bytes, big-endian, not as 13 decimal digits:
-- with Redis' one-byte header for short strings that is an 8-byte allocation instead of 16,
-- once per pending entity. Decimal anchors (written before this encoding) are still read.
local function encode_anchor(ms)
  local bytes = {}
  for i = 6, 1, -1 do
    bytes[i] = ms % 256
    ms = math.floor(ms / 256)
  end
  return string.char(unpack(bytes))
end

-- The anchor of a pending-hash value (false or nil when there is none).
local function decode_anchor(raw)
  if not raw then return nil end
  if #raw ~= 6 then return tonumber(raw) end
  local ms = 0
  for i = 1, 6 do ms = ms * 256 + string.byte(raw, i) end
  return ms
end

