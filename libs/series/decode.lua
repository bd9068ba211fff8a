-- Shared by the series scripts (store.go prepends it to each): reading
-- records and numbers without Lua's struct library and C's strtod, which
-- Redis' Lua has and miniredis' (the embedded default without
-- redis-server) has not.

-- inf is the infinity (miniredis' math.huge is the largest finite number).
local inf = 1 / 0

-- u32 is the little-endian unsigned 32-bit integer at p of b.
local function u32(b, p)
  local b1, b2, b3, b4 = string.byte(b, p, p + 3)
  return b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
end

-- stepAt is the record's step (int64 little-endian) at p of b, as a
-- number: rounded once, as struct.unpack('<l') gives it.
local function stepAt(b, p)
  local lo, hi = u32(b, p), u32(b, p + 4)
  if hi >= 2147483648 then hi = hi - 4294967296 end
  return hi * 4294967296 + lo
end

-- valueAt is the record's value (float64 little-endian) at p of b,
-- exactly (struct.unpack('<d')).
local function valueAt(b, p)
  local lo, hi = u32(b, p), u32(b, p + 4)
  local sign = 1
  if hi >= 2147483648 then
    sign, hi = -1, hi - 2147483648
  end
  local e = math.floor(hi / 1048576)
  local m = (hi % 1048576) * 4294967296 + lo
  if e == 0 then return sign * m * 2 ^ -1074 end
  if e == 2047 then
    if m == 0 then return sign * inf end
    return 0 / 0
  end
  return sign * (1 + m / 2 ^ 52) * 2 ^ (e - 1023)
end

-- num reads a number as Go writes it ("+Inf", "-Inf") or as this Lua's
-- string.format did ("inf", "-inf", "+Inf"): tonumber reads those only
-- where strtod does.
local function num(w)
  local l = string.lower(w)
  if l == 'inf' or l == '+inf' then return inf end
  if l == '-inf' then return -inf end
  return tonumber(w)
end
