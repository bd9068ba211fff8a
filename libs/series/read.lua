-- Finds a step range of one series for series.Store.Read. KEYS[1] the
-- job's index hash, KEYS[2] the series string; ARGV: metric name, from, to
-- (steps, inclusive; '' for no bound).
-- Returns nil for no series; {1, lo, hi} when the series is ordered (its
-- summary's ninth field is 1: append.lua): the records within the range
-- are the bytes lo..hi-1, found by two binary searches over its 24-byte
-- records, so a zoomed read costs the records it returns, not the series;
-- else {0, 0, 0}: the caller reads every record, sorts and filters. The
-- bytes are read by the caller (GETRANGE), not returned from here: a
-- string passed through Lua is copied twice (a whole series read so took
-- 2.4 times as long); appends only add bytes after them.
local n = redis.call('STRLEN', KEYS[2])
if n == 0 then
  return nil
end
local from, to = ARGV[2], ARGV[3]
local ordered = false
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  local k = 0
  for w in string.gmatch(v, '%S+') do
    k = k + 1
    if k == 9 then ordered = (w == '1') end
  end
end
if not ordered then
  return {0, 0, 0}
end
local count = n / 24
-- The step of record i (stepAt: decode.lua).
local function stepOf(i)
  return stepAt(redis.call('GETRANGE', KEYS[2], i * 24, i * 24 + 7), 1)
end
-- first: the first record of step >= bound; past: the first of step > bound.
local function search(bound, past)
  local lo, hi = 0, count
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local st = stepOf(mid)
    if st < bound or (past and st == bound) then lo = mid + 1 else hi = mid end
  end
  return lo
end
local lo, hi = 0, count
if from ~= '' then lo = search(tonumber(from), false) end
if to ~= '' then hi = search(tonumber(to), true) end
return {1, lo * 24, math.max(hi, lo) * 24}
