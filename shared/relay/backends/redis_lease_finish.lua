-- finish: record the outcome of the attempt holding the token.
-- KEYS: the job's base key. ARGV: member, token, succeeded ('1'/'0'), error ('' for none),
-- has_error ('1'/'0'), retention_ms.
-- Returns {'ok', new state} or {'lost', why, detail}.

local active, purge = KEYS[1] .. 'active', KEYS[1] .. 'purge'
local run = KEYS[1] .. 'run:' .. ARGV[1]
local member, succeeded = ARGV[1], ARGV[3] == '1'
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
redis.call('HSET', run, 'state', state, 'failures', failures)
redis.call('HDEL', run, 'expires_ms')
if ARGV[5] == '1' then
  redis.call('HSET', run, 'error', ARGV[4])
else
  redis.call('HDEL', run, 'error')
end
if succeeded then
  redis.call('HDEL', run, 'reason')
else
  redis.call('HSET', run, 'reason', 'failed')
end
if state == 'pending' then
  redis.call('HDEL', run, 'finished_ms')
  redis.call('ZADD', active, 0, member)
else
  redis.call('HSET', run, 'finished_ms', now)
  redis.call('ZREM', active, member)
end
keep(run, purge, member, now, tonumber(ARGV[6]))
return {'ok', state}
