-- release: hand the run over; any instance may lease it at once. Not a failure, and a run not
-- started yet spends no attempt.
-- KEYS: the job's base key, <prefix>live (not on Redis Cluster). ARGV: member, token, retention_ms.
-- Returns {'ok'} or {'lost', why, detail}.

local run = KEYS[1] .. 'run:' .. ARGV[1]
local retention = tonumber(ARGV[3])
local f, lost = held(run, tonumber(ARGV[2]))
if not f then
  return lost
end
-- A run never started gives its attempt back: the next lease has the same attempt number.
local attempt = tonumber(f[7])
if (f[6] or '') == '' then
  attempt = attempt - 1
end
redis.call('HSET', run, 'state', 'pending', 'reason', 'released', 'expires_ms', '', 'attempt',
  attempt)
index(KEYS[2], run, 0)
redis.call('PEXPIRE', run, retention)
renew(KEYS[1] .. 'slots', retention)
renew(KEYS[1] .. 'active', retention)
return {'ok'}
