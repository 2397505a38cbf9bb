-- skip: record the run skipped with a reason unless it has a record.
-- KEYS: the job's base key, <prefix>live (not on Redis Cluster). ARGV: member, slot_ms, reason, retention_ms. Returns 1 if recorded.

local member, retention = ARGV[1], tonumber(ARGV[4])
local run = KEYS[1] .. 'run:' .. member
if redis.call('EXISTS', run) == 1 then
  return 0
end
local now = clock()
redis.call('HSET', run, 'state', 'skipped', 'reason', ARGV[3], 'finished_ms', now)
redis.call('PEXPIRE', run, retention)
redis.call('ZADD', KEYS[1] .. 'slots', ARGV[2], member)
renew(KEYS[1] .. 'slots', retention)
trim(KEYS[1], now, retention, KEYS[2])
return 1
