-- One admission, settlement or look, atomically, on the Redis clock: app/admission/buckets.py in Lua.
-- KEYS[i]: the counter of check i.
-- ARGV: mode (admit | settle | peek), request id, window_s, lease_ttl_s, tokens (admit: the
--   reservation; settle: used minus reserved), then per check: kind (r t c b), limit, period
--   (b: "day" / "month" to admit and peek; the period id charged at admission to settle).
-- Budget counters live under KEYS[i] .. ":" .. period id (not declared: single-node Redis only).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local mode, id = ARGV[1], ARGV[2]
local window, ttl, tokens = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local n = #KEYS

local function civil(z)  -- days since 1970-01-01 -> year, month (Howard Hinnant's algorithm)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m
end

local function days_from_civil(y, m)  -- the first of month m of year y -> days since 1970-01-01
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5)
  return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
end

local function period_of(p)  -- id, end (Unix seconds)
  local day = math.floor(now / 86400)
  if p == 'day' then return 'd' .. day, (day + 1) * 86400 end
  local y, m = civil(day)
  local ny, nm = y, m + 1
  if nm > 12 then ny, nm = y + 1, 1 end
  return 'm' .. (y * 100 + m), days_from_civil(ny, nm) * 86400
end

-- A bucket is stored as what was taken from it (u), draining at the refill rate, so that a new limit
-- keeps what was used; its level is limit - u.
local function bucket(key, limit)
  local v = redis.call('HMGET', key, 'u', 't')
  local used, at = tonumber(v[1]), tonumber(v[2])
  if used == nil then return limit end
  return limit - math.max(0, used - math.max(0, now - at) * limit / window)
end

local function put_bucket(key, level, limit)
  redis.call('HSET', key, 'u', tostring(math.max(0, limit - level)), 't', tostring(now))
  -- Expire when full again: a missing bucket reads as full.
  redis.call('PEXPIRE', key, math.ceil((limit - level) * window / limit * 1000) + 1000)
end

local kinds, limits, periods, levels = {}, {}, {}, {}
for i = 1, n do
  kinds[i] = ARGV[3 * i + 3]
  limits[i] = tonumber(ARGV[3 * i + 4])
  periods[i] = ARGV[3 * i + 5]
end

if mode == 'settle' then
  for i = 1, n do
    local k = kinds[i]
    if k == 'c' then
      redis.call('ZREM', KEYS[i], id)
    elseif k == 't' and tokens ~= 0 then
      put_bucket(KEYS[i], math.min(limits[i], bucket(KEYS[i], limits[i]) - tokens), limits[i])
    elseif k == 'b' and tokens ~= 0 and periods[i] ~= '' then
      local key = KEYS[i] .. ':' .. periods[i]
      if redis.call('EXISTS', key) == 1 then
        local left = redis.call('INCRBY', key, tokens)
        if left < 0 then redis.call('SET', key, 0, 'KEEPTTL') end
      end
    end
  end
  return {1}
end

-- Read every check first: nothing changes unless all of them admit.
for i = 1, n do
  local k, key, limit = kinds[i], KEYS[i], limits[i]
  if k == 'r' or k == 't' then
    levels[i] = bucket(key, limit)
  elseif k == 'c' then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    levels[i] = redis.call('ZCARD', key)
  else
    local pid, pend = period_of(periods[i])
    levels[i] = tonumber(redis.call('GET', key .. ':' .. pid) or '0')
  end
end

-- The first check that refuses (if any) decides; a refused call changes nothing, and reports states.
local out = {1}
if mode == 'admit' then
  for i = 1, n do
    local k, limit, level = kinds[i], limits[i], levels[i]
    local cost = (k == 'r' or k == 'c') and 1 or tokens
    local deny = nil
    if k == 'c' then
      if level + 1 > limit then deny = {0, i, '-1', 0} end
    elseif k == 'b' then
      if level + cost > limit then
        local _, pend = period_of(periods[i])
        deny = {0, i, tostring(pend - now), cost > limit and 1 or 0}
      end
    elseif cost > level then
      if cost > limit then deny = {0, i, '-1', 1} else deny = {0, i, tostring((cost - level) * window / limit), 0} end
    end
    if deny then
      out, mode = deny, 'peek'
      break
    end
  end
end

for i = 1, n do
  local k, key, limit, level = kinds[i], KEYS[i], limits[i], levels[i]
  local remaining, reset, pid = level, 0, ''
  if k == 'r' or k == 't' then
    if mode == 'admit' then
      level = level - ((k == 'r') and 1 or tokens)
      put_bucket(key, level, limit)
    end
    remaining, reset = level, (limit - level) * window / limit
  elseif k == 'c' then
    if mode == 'admit' then
      redis.call('ZADD', key, now + ttl, id)
      redis.call('PEXPIRE', key, math.ceil(ttl * 1000))
      level = level + 1
    end
    remaining = limit - level
  else
    local pend
    pid, pend = period_of(periods[i])
    if mode == 'admit' then
      redis.call('INCRBY', key .. ':' .. pid, tokens)
      redis.call('EXPIREAT', key .. ':' .. pid, math.ceil(pend) + 86400)
      level = level + tokens
    end
    remaining, reset = limit - level, pend - now
  end
  out[#out + 1] = tostring(remaining)
  out[#out + 1] = tostring(reset)
  out[#out + 1] = pid
end
return out
