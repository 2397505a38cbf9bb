-- start: the runner takes the run over and renews its lease.
-- KEYS: the job's base key, <prefix>live (not on Redis Cluster). ARGV: member, token, owner, lease_ms, retention_ms.
-- Returns {'ok', attempt, schedule version or ''} or {'lost', why, detail}.

local member, owner, lease = ARGV[1], ARGV[3], tonumber(ARGV[4])
local run = KEYS[1] .. 'run:' .. member
local now = clock()
local f, lost = held(run, tonumber(ARGV[2]),
  {'failures', 'max_attempts', 'owner', 'started_ms', 'attempt', 'kept_ms', 'schedule_version'})
if not f then
  return lost
end
local started = f[6] or ''
if started ~= '' and f[5] ~= owner then
  return {'lost', 'started', f[5]}
end
local kept = keep(KEYS[1], run, now, tonumber(ARGV[5]) + lease, f[8])
redis.call('HSET', run, 'owner', owner, 'expires_ms', now + lease,
  'started_ms', started ~= '' and started or now, 'kept_ms', kept)
index(KEYS[2], run, now + lease)
return {'ok', tonumber(f[7]), f[9] or ''}
