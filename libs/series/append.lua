-- Appends a batch of points to one job's series (series.Store.Append).
-- KEYS[1] index hash, KEYS[2] seen hash, KEYS[3] the job's swept marker,
-- KEYS[4] the job's count of points kept, KEYS[5..] one string per series.
-- ARGV: source, seq, max points per series, max series per job, max points
-- per job, the points the job's project may still add (its budget less
-- what it keeps, read before the script: the project's count is another
-- hash slot), then per series: name, records (24 bytes each), count,
-- firstStep, first, lastStep, last, min, max (the batch's own summary), and
-- 1 when the batch's steps never decrease (else 0).
-- A series' summary is "count firstStep first lastStep last min max dropped
-- ordered": ordered is 1 while its records' steps never decrease in the
-- order stored (read.lua then reads a step range alone); a summary written
-- before the field was kept has 8 fields and counts as not ordered.
-- Returns {duplicate 0/1 (2: the job's series were swept), appended,
-- dropped, the job's points kept after it, points dropped for the project's
-- budget (counted in dropped too)}.
if redis.call('EXISTS', KEYS[3]) == 1 then
  -- Swept by retention: a late batch must not start a partial series.
  return {2, 0, 0, 0, 0}
end
local src, seq = ARGV[1], tonumber(ARGV[2])
local maxPoints, maxSeries, maxJob = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local projectRoom = tonumber(ARGV[6])
local total = tonumber(redis.call('GET', KEYS[4]) or '0')
if src ~= '' then
  local last = redis.call('HGET', KEYS[2], src)
  if last and tonumber(last) >= seq then
    return {1, 0, 0, total, 0}
  end
end
local nseries = redis.call('HLEN', KEYS[1])
local appended, dropped, overBudget = 0, 0, 0
local fmt = function(x) return string.format('%.17g', x) end
for i = 5, #KEYS do
  local a = 7 + (i - 5) * 10
  local name, blob, n = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  local fs, fv, ls, lv = num(ARGV[a + 3]), num(ARGV[a + 4]), num(ARGV[a + 5]), num(ARGV[a + 6])
  local mn, mx = num(ARGV[a + 7]), num(ARGV[a + 8])
  local batchOrdered = tonumber(ARGV[a + 9])
  local cur = redis.call('HGET', KEYS[1], name)
  local s
  if cur then
    s = {}
    for w in string.gmatch(cur, '%S+') do s[#s + 1] = num(w) end
  elseif nseries >= maxSeries then
    s = nil
  elseif math.min(maxJob - total, projectRoom - appended) <= 0 then
    -- None of a new series' points would be kept: no series is made (an
    -- empty one would list a summary of points it does not hold).
    s = nil
    if maxJob - total > 0 then overBudget = overBudget + n end
  else
    nseries = nseries + 1
    s = {0, fs, fv, ls, lv, mn, mx, 0, 0}
  end
  if s == nil then
    dropped = dropped + n
  else
    local room = math.min(maxPoints - s[1], maxJob - total)
    local take = n
    if take > room then take = math.max(room, 0) end
    local budget = math.max(projectRoom - appended, 0)
    if take > budget then
      overBudget = overBudget + (take - budget)
      take = budget
    end
    if take < n then
      -- Cut at the limit: the kept part's summary is recomputed here.
      blob = string.sub(blob, 1, take * 24)
      fs, ls = nil, nil
      for k = 0, take - 1 do
        local st = stepAt(blob, k * 24 + 1)
        local v = valueAt(blob, k * 24 + 17)
        if fs == nil or st < fs then fs, fv = st, v end
        if ls == nil or st >= ls then ls, lv = st, v end
        if k == 0 or v < mn then mn = v end
        if k == 0 or v > mx then mx = v end
      end
      s[8] = s[8] + (n - take)
      dropped = dropped + (n - take)
    end
    if take > 0 then
      redis.call('APPEND', KEYS[i], blob)
      -- Still ordered: it was (or held nothing), the batch is, and the
      -- batch starts at or after the greatest step kept (s[4], before it
      -- moves; an ordered batch's least step is its first). Steps are
      -- numbers here (doubles): past 2^53 two steps may round to one, so
      -- a tie there counts as going back.
      if s[1] == 0 then
        s[9] = batchOrdered
      elseif (s[9] or 0) == 1 and (batchOrdered == 0 or fs < s[4] or
          (fs == s[4] and math.abs(fs) >= 9007199254740992)) then
        s[9] = 0
      end
      if s[1] == 0 then
        s[2], s[3], s[4], s[5], s[6], s[7] = fs, fv, ls, lv, mn, mx
      else
        if fs < s[2] then s[2], s[3] = fs, fv end
        if ls >= s[4] then s[4], s[5] = ls, lv end
        if mn < s[6] then s[6] = mn end
        if mx > s[7] then s[7] = mx end
      end
      s[1] = s[1] + take
      total = total + take
      appended = appended + take
    end
    redis.call('HSET', KEYS[1], name, fmt(s[1]) .. ' ' .. fmt(s[2]) .. ' ' .. fmt(s[3]) .. ' ' .. fmt(s[4]) .. ' ' ..
      fmt(s[5]) .. ' ' .. fmt(s[6]) .. ' ' .. fmt(s[7]) .. ' ' .. fmt(s[8]) .. ' ' .. fmt(s[9] or 0))
  end
end
if appended > 0 then
  redis.call('SET', KEYS[4], total)
end
if src ~= '' then
  redis.call('HSET', KEYS[2], src, ARGV[2])
end
return {0, appended, dropped, total, overBudget}
