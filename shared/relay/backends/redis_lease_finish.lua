-- finish: record the outcome of the attempt holding the token.
-- KEYS: the job's base key, <prefix>live (not on Redis Cluster). ARGV: member, token, succeeded ('1'/'0'), error ('' for none),
-- retention_ms.
-- Returns {'ok', new state} or {'lost', why, detail}. The same finish by the same token again returns
-- the state it recorded and changes nothing.

local member, succeeded, retention = ARGV[1], ARGV[3] == '1', tonumber(ARGV[5])
local run = KEYS[1] .. 'run:' .. member
local now = clock()
local token = tonumber(ARGV[2])
local f, lost = held(run, token, {'failures', 'max_attempts'})
if not f then
  if lost[2] == 'state' then
    local again = redis.call('HMGET', run, 'state', 'reason')
    if again[1] == 'succeeded' or again[2] == 'failed' then
      -- This token's own finish again (its answer was lost, or too few replicas confirmed it):
      -- answer what it recorded and change nothing. Setting a field to its value makes the step a
      -- write, so a WAIT after it waits until the replicas have the first finish too.
      redis.call('HSET', run, 'state', again[1])
      return {'ok', again[1]}
    end
  end
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
-- One finish in four trims, eight runs at most: as many as two a finish, for a quarter of the reads.
if token % 4 == 0 then
  trim(KEYS[1], now, retention, KEYS[2], 8)
end
return {'ok', state}
