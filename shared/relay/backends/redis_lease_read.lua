-- read: records of one job, for runs(), reclaimable() and last_slot().
-- KEYS: the job's base key. ARGV: mode, limit.
-- mode 'newest': the `limit` newest runs. mode 'reclaimable': runs another instance may lease now
-- (pending, or running with an expired lease), oldest slot first. mode 'last': the newest slot.
-- Returns {member, slot_ms, field, value, ...} per run, or {slot_ms} for 'last'.

local active, slots, purge = KEYS[1] .. 'active', KEYS[1] .. 'slots', KEYS[1] .. 'purge'
local base, mode, limit = KEYS[1] .. 'run:', ARGV[1], tonumber(ARGV[2])
local now = clock()
trim(active, slots, purge, now)
if mode == 'last' then
  local top = redis.call('ZREVRANGE', slots, 0, 0, 'WITHSCORES')
  return top[2] and {top[2]} or {}
end
local members
if mode == 'newest' then
  members = redis.call('ZREVRANGE', slots, 0, limit - 1)
else
  members = redis.call('ZRANGEBYSCORE', active, '-inf', now)
end
local found = {}
for _, member in ipairs(members) do
  local fields = redis.call('HGETALL', base .. member)
  if #fields > 0 then
    table.insert(found, {member, redis.call('ZSCORE', slots, member), unpack(fields)})
  end
end
if mode == 'reclaimable' then
  table.sort(found, function(a, b) return tonumber(a[2]) < tonumber(b[2]) end)
  while #found > limit do
    table.remove(found)
  end
end
return found
