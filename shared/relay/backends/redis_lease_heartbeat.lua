-- heartbeat: extend the lease to now + lease on the server's clock.
-- KEYS: the job's base key. ARGV: member, token, lease_ms, retention_ms.
-- Returns {'ok'} or {'lost', why, detail}.

local active, purge = KEYS[1] .. 'active', KEYS[1] .. 'purge'
local member, lease = ARGV[1], tonumber(ARGV[3])
local run = KEYS[1] .. 'run:' .. member
local now = clock()
local f, lost = held(run, tonumber(ARGV[2]))
if not f then
  return lost
end
redis.call('HSET', run, 'expires_ms', now + lease)
redis.call('ZADD', active, now + lease, member)
extend(active, tonumber(ARGV[4]) + lease)
keep(run, purge, member, now, tonumber(ARGV[4]) + lease)
return {'ok'}
