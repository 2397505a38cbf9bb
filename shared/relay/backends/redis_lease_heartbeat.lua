-- heartbeat: extend the lease to now + lease on the server's clock.
-- KEYS: run, active, purge. ARGV: member, token, lease_ms, retention_ms.
-- Returns {'ok'} or {'lost', why, detail}.

local run, active, purge = KEYS[1], KEYS[2], KEYS[3]
local member, lease = ARGV[1], tonumber(ARGV[3])
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
