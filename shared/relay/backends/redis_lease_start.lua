-- start: the runner takes the run over and renews its lease.
-- KEYS: the job's base key, <prefix>live (not on Redis Cluster). ARGV: member, token, owner, lease_ms, retention_ms.
-- Returns {'ok', attempt} or {'lost', why, detail}.

local member, owner, lease = ARGV[1], ARGV[3], tonumber(ARGV[4])
local run = KEYS[1] .. 'run:' .. member
local now = clock()
local f, lost = held(run, tonumber(ARGV[2]))
if not f then
  return lost
end
local started = f[6] or ''
if started ~= '' and f[5] ~= owner then
  return {'lost', 'started', f[5]}
end
redis.call('HSET', run, 'owner', owner, 'expires_ms', now + lease,
  'started_ms', started ~= '' and started or now)
index(KEYS[2], run, now + lease)
renew(run, tonumber(ARGV[5]) + lease)
renew(KEYS[1] .. 'active', tonumber(ARGV[5]) + lease)
return {'ok', tonumber(f[7])}
