-- read: records of one job, for runs(), reclaimable() and last_slot().
-- KEYS: the job's base key, <prefix>live (not on Redis Cluster).
-- ARGV: mode, limit, retention_ms, 'ro' to write nothing (else 'rw'), then, for 'reclaimable',
-- the members the index of live runs named for this job (see below).
-- mode 'newest': the `limit` newest runs. mode 'history': see below. mode 'reclaimable': runs another instance may lease now
-- (pending, or running with an expired lease), oldest slot first. mode 'last': the newest slot.
-- Returns {member, slot_ms, field, value, ...} per run, or {slot_ms} for 'last'.
-- 'reclaimable' also makes the index of live runs agree with the job's runs (unless 'ro'): it
-- adds the job's live runs, with their scores (the first sweep of a store written before the index
-- existed reads every job so), and drops the members it named that are no longer live.

local base, live, mode, limit = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local now = clock()
local sync = live and ARGV[4] ~= 'ro' and mode == 'reclaimable'
if ARGV[4] ~= 'ro' then
  trim(base, now, tonumber(ARGV[3]), live)
end
if mode == 'last' then
  local _, slot = newest_slot(base)
  return slot and {slot} or {}
end
if mode == 'history' then
  -- The `limit` newest slot runs (manual ones left out), then the newest success of any kind,
  -- walking the slots newest first a page at a time: {{record...}, {record} or {}}.
  local recent, success, from = {}, {}, 0
  while #success == 0 do
    local page = redis.call('ZREVRANGE', base .. 'slots', from, from + 99, 'WITHSCORES')
    if #page == 0 then
      break
    end
    for i = 1, #page, 2 do
      local fields = redis.call('HGETALL', base .. 'run:' .. page[i])
      local record = {page[i], page[i + 1], unpack(fields)}
      if #fields > 0 then
        if #recent < limit and string.sub(page[i], 1, 7) ~= 'manual:' then
          table.insert(recent, record)
        end
        for j = 1, #fields, 2 do
          if #success == 0 and fields[j] == 'state' and fields[j + 1] == 'succeeded' then
            success = {record}
          end
        end
      end
    end
    from = from + 100
    if #recent >= limit and #success > 0 then
      break
    end
  end
  return {recent, success}
end

-- The run's score in the index of live runs, written only when it is not already that.
local function agree(run, state, expires)
  local score = nil
  if state == 'pending' then
    score = 0
  elseif state == 'running' then
    score = tonumber(expires) or 0
  end
  local held = redis.call('ZSCORE', live, run)
  if (held and tonumber(held)) ~= score then
    index(live, run, score)
  end
end

local members
if mode == 'newest' then
  members = redis.call('ZREVRANGE', base .. 'slots', 0, limit - 1, 'WITHSCORES')
else
  members = redis.call('ZRANGE', base .. 'active', 0, -1, 'WITHSCORES')
end
local found, seen = {}, {}
for i = 1, #members, 2 do
  local run = base .. 'run:' .. members[i]
  local fields = redis.call('HGETALL', run)
  local record = {members[i], members[i + 1], unpack(fields)}
  if #fields > 0 and mode == 'newest' then
    table.insert(found, record)
  elseif mode == 'reclaimable' then
    local f = redis.call('HMGET', run, 'state', 'expires_ms')
    if sync then
      seen[members[i]] = true
      agree(run, f[1], f[2])
    end
    if f[1] == 'pending' or (f[1] == 'running' and (tonumber(f[2]) or 0) <= now) then
      table.insert(found, record)
    end
  end
  if #found >= limit and not sync then
    break
  end
end
if sync then
  for i = 5, #ARGV do
    if not seen[ARGV[i]] then
      index(live, base .. 'run:' .. ARGV[i], nil)
    end
  end
end
while #found > limit do
  table.remove(found)
end
return found
