-- skip: record the run skipped with a reason unless it has a record.
-- KEYS: run, slots, purge. ARGV: member, slot_ms, reason, retention_ms. Returns 1 if recorded.

local run, slots, purge = KEYS[1], KEYS[2], KEYS[3]
local member, retention = ARGV[1], tonumber(ARGV[4])
if redis.call('EXISTS', run) == 1 then
  return 0
end
local now = clock()
redis.call('HSET', run, 'state', 'skipped', 'reason', ARGV[3], 'finished_ms', now)
redis.call('ZADD', slots, ARGV[2], member)
extend(slots, retention)
keep(run, purge, member, now, retention)
return 1
