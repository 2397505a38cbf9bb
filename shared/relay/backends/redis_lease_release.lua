-- release: hand the run over; any instance may lease it at once. Not a failure.
-- KEYS: the job's base key. ARGV: member, token, retention_ms.
-- Returns {'ok'} or {'lost', why, detail}.

local active, purge = KEYS[1] .. 'active', KEYS[1] .. 'purge'
local run = KEYS[1] .. 'run:' .. ARGV[1]
local member = ARGV[1]
local now = clock()
local f, lost = held(run, tonumber(ARGV[2]))
if not f then
  return lost
end
redis.call('HSET', run, 'state', 'pending', 'reason', 'released')
redis.call('HDEL', run, 'expires_ms')
redis.call('ZADD', active, 0, member)
keep(run, purge, member, now, tonumber(ARGV[3]))
return {'ok'}
