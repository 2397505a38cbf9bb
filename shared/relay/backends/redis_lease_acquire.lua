-- acquire: decide several runs of one job, in order, in one step (the rules of relay.lease_rules).
-- KEYS: token, active, slots, purge, then one run hash per request.
-- ARGV: retention_ms, then per request: member, slot_ms, owner, lease_ms, max_attempts,
--       overlap_skip ('1' or '0'), stale_after_ms ('' for none).
-- Returns per request {outcome} or {'won', attempt, token}.

local token_key, active, slots, purge = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local retention = tonumber(ARGV[1])
local now, now_us = clock()

-- A new token grows strictly, and stays above every token handed out before a restart that lost
-- the counter: it is at least the server's time in microseconds.
local function next_token()
  local last = tonumber(redis.call('GET', token_key) or '0')
  local token = math.max(last + 1, now_us)
  redis.call('SET', token_key, string.format('%.0f', token))
  return token
end

local function other_live(member)
  local live = redis.call('ZRANGEBYSCORE', active, '(' .. now, '+inf', 'LIMIT', 0, 2)
  for _, other in ipairs(live) do
    if other ~= member then
      return true
    end
  end
  return false
end

local function skip(r, reason)
  redis.call('HSET', r.run, 'state', 'skipped', 'reason', reason, 'finished_ms', now)
  redis.call('ZADD', slots, r.slot, r.member)
  keep(r.run, purge, r.member, now, retention)
end

local function fail(r, failures)
  redis.call('HSET', r.run, 'state', 'failed', 'failures', failures, 'reason', 'max_attempts',
    'finished_ms', now)
  redis.call('HDEL', r.run, 'expires_ms')
  redis.call('ZREM', active, r.member)
  keep(r.run, purge, r.member, now, retention)
end

local function lease(r, failures, attempt, max_attempts)
  local token = next_token()
  local expires = now + r.lease
  redis.call('HSET', r.run, 'state', 'running', 'attempt', attempt + 1, 'failures', failures,
    'max_attempts', max_attempts, 'token', string.format('%.0f', token), 'owner', r.owner,
    'expires_ms', expires)
  redis.call('HDEL', r.run, 'reason', 'started_ms')
  redis.call('ZADD', active, expires, r.member)
  redis.call('ZADD', slots, r.slot, r.member)
  keep(r.run, purge, r.member, now, retention + r.lease)
  return {'won', attempt + 1, token}
end

local function acquire(r)
  local f = redis.call('HMGET', r.run, 'state', 'expires_ms', 'failures', 'max_attempts', 'attempt')
  local state = f[1]
  if not state then
    if r.stale and now - r.slot > r.stale then
      skip(r, 'stale')
      return {'stale'}
    end
    if r.overlap and other_live(r.member) then
      skip(r, 'overlap')
      return {'overlap'}
    end
    return lease(r, 0, 0, r.max_attempts)
  end
  if state ~= 'running' and state ~= 'pending' then
    return {'finished'}
  end
  local failures = tonumber(f[3])
  if state == 'running' then
    if f[2] and tonumber(f[2]) > now then
      return {'held'}
    end
    failures = failures + 1 -- the runner stopped heartbeating: its attempt counts as failed
  end
  if failures >= tonumber(f[4]) then
    fail(r, failures)
    return {'exhausted'}
  end
  return lease(r, failures, tonumber(f[5]), tonumber(f[4]))
end

trim(active, slots, purge, now)
local results, longest = {}, 0
for i = 1, #KEYS - 4 do
  local a = 1 + (i - 1) * 7
  local r = {
    run = KEYS[4 + i], member = ARGV[a + 1], slot = tonumber(ARGV[a + 2]), owner = ARGV[a + 3],
    lease = tonumber(ARGV[a + 4]), max_attempts = tonumber(ARGV[a + 5]),
    overlap = ARGV[a + 6] == '1', stale = tonumber(ARGV[a + 7]),
  }
  results[i] = acquire(r)
  longest = math.max(longest, r.lease)
end
for _, key in ipairs({token_key, active, slots}) do
  extend(key, retention + longest)
end
return results
