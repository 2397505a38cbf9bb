-- start: the runner takes the run over and renews its lease.
-- KEYS: the job's base key. ARGV: member, token, owner, lease_ms, retention_ms.
-- Returns {'ok', attempt} or {'lost', why, detail}.

local active, purge = KEYS[1] .. 'active', KEYS[1] .. 'purge'
local member, owner, lease = ARGV[1], ARGV[3], tonumber(ARGV[4])
local run = KEYS[1] .. 'run:' .. member
local now = clock()
local f, lost = held(run, tonumber(ARGV[2]))
if not f then
  return lost
end
if f[6] and f[5] ~= owner then
  return {'lost', 'started', f[5]}
end
redis.call('HSET', run, 'owner', owner, 'expires_ms', now + lease)
if not f[6] then
  redis.call('HSET', run, 'started_ms', now)
end
redis.call('ZADD', active, now + lease, member)
extend(active, tonumber(ARGV[5]) + lease)
keep(run, purge, member, now, tonumber(ARGV[5]) + lease)
return {'ok', tonumber(f[7])}
