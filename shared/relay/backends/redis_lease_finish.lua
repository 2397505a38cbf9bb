-- finish: record the outcome of the attempt holding the token.
-- KEYS: the job's base key, <prefix>live (not on Redis Cluster). ARGV: member, token, succeeded ('1'/'0'), error ('' for none),
-- retention_ms.
-- Returns {'ok', new state} or {'lost', why, detail}.

local member, succeeded, retention = ARGV[1], ARGV[3] == '1', tonumber(ARGV[5])
local run = KEYS[1] .. 'run:' .. member
local now = clock()
local f, lost = held(run, tonumber(ARGV[2]))
if not f then
  return lost
end
local failures, state = tonumber(f[3]), 'succeeded'
if not succeeded then
  failures = failures + 1
  state = failures >= tonumber(f[4]) and 'failed' or 'pending'
end
redis.call('HSET', run, 'state', state, 'failures', failures, 'error', ARGV[4], 'expires_ms', '',
  'reason', succeeded and '' or 'failed', 'finished_ms', state == 'pending' and '' or now)
redis.call('PEXPIRE', run, retention)
if state ~= 'pending' then
  redis.call('ZREM', KEYS[1] .. 'active', member)
end
index(KEYS[2], run, state == 'pending' and 0 or nil)
renew(KEYS[1] .. 'slots', retention)
trim(KEYS[1], now, retention, KEYS[2])
return {'ok', state}
