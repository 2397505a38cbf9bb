-- read: records of one job, for runs(), reclaimable() and last_slot().
-- KEYS: the job's base key. ARGV: mode, limit, retention_ms, and 'ro' to write nothing.
-- mode 'newest': the `limit` newest runs. mode 'reclaimable': runs another instance may lease now
-- (pending, or running with an expired lease), oldest slot first. mode 'last': the newest slot.
-- Returns {member, slot_ms, field, value, ...} per run, or {slot_ms} for 'last'.

local base, mode, limit = KEYS[1], ARGV[1], tonumber(ARGV[2])
local now = clock()
if ARGV[4] ~= 'ro' then
  trim(base, now, tonumber(ARGV[3]))
end
if mode == 'last' then
  local _, slot = newest_slot(base)
  return slot and {slot} or {}
end
local members
if mode == 'newest' then
  members = redis.call('ZREVRANGE', base .. 'slots', 0, limit - 1, 'WITHSCORES')
else
  members = redis.call('ZRANGE', base .. 'active', 0, -1, 'WITHSCORES')
end
local found = {}
for i = 1, #members, 2 do
  local fields = redis.call('HGETALL', base .. 'run:' .. members[i])
  local record = {members[i], members[i + 1], unpack(fields)}
  if #fields > 0 and mode == 'newest' then
    table.insert(found, record)
  elseif #fields > 0 then
    local f = redis.call('HMGET', base .. 'run:' .. members[i], 'state', 'expires_ms')
    if f[1] == 'pending' or (f[1] == 'running' and (tonumber(f[2]) or 0) <= now) then
      table.insert(found, record)
    end
  end
  if #found >= limit then
    break
  end
end
return found
