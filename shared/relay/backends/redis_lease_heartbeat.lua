-- heartbeat: extend the lease to now + lease on the server's clock.
-- KEYS: the job's base key, <prefix>live (not on Redis Cluster). ARGV: member, token, lease_ms, retention_ms.
-- Returns {'ok'} or {'lost', why, detail}.

local lease = tonumber(ARGV[3])
local run = KEYS[1] .. 'run:' .. ARGV[1]
local now = clock()
local f, lost = held(run, tonumber(ARGV[2]), {'kept_ms'})
if not f then
  return lost
end
local kept = keep(KEYS[1], run, now, tonumber(ARGV[4]) + lease, f[3])
redis.call('HSET', run, 'expires_ms', now + lease, 'kept_ms', kept)
index(KEYS[2], run, now + lease)
return {'ok'}
