-- skip: record the run skipped with a reason unless it has a record.
-- KEYS: the job's base key. ARGV: member, slot_ms, reason, retention_ms. Returns 1 if recorded.

local slots, purge = KEYS[1] .. 'slots', KEYS[1] .. 'purge'
local run = KEYS[1] .. 'run:' .. ARGV[1]
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
