-- acquire: decide runs in order, one step per call (the rules of relay.lease_rules).
-- KEYS: one base key per job (one job on Redis Cluster, where a script stays in one slot).
-- ARGV: retention_ms, then per job: its number of requests n, then n pairs of a spec
-- "<member> <slot_ms> <lease_ms> <max_attempts> <overlap_skip 1|0> <stale_after_ms or empty>"
-- and the owner.
-- Returns one string (cheaper for the client to read than nested arrays): per job new_job, then
-- per request outcome, attempt and token, all separated by spaces. new_job is 1 if the job had no
-- token yet (a new job, or a server that lost its keys): the caller then lists the job.

local retention = tonumber(ARGV[1])
local now, now_us = clock()
local results = {}

local function decide_job(base, first, count)
  local token_key, active, slots = base .. 'token', base .. 'active', base .. 'slots'

  -- A new token grows strictly, and stays above every token handed out before a restart that
  -- lost the counter: it is at least the server's time in microseconds.
  local stored = redis.call('GET', token_key)
  local last_token = tonumber(stored or '0')
  local function next_token()
    last_token = math.max(last_token + 1, now_us)
    return last_token
  end

  local function other_live(member)
    for _, other in ipairs(redis.call('ZRANGE', active, 0, -1)) do
      if other ~= member then
        local f = redis.call('HMGET', base .. 'run:' .. other, 'state', 'expires_ms')
        if f[1] == 'running' and tonumber(f[2]) > now then
          return true
        end
      end
    end
    return false
  end

  local wrote = false

  local function skip(r, reason)
    wrote = true
    redis.call('HSET', r.run, 'state', 'skipped', 'reason', reason, 'finished_ms', now)
    redis.call('PEXPIRE', r.run, retention)
    redis.call('ZADD', slots, r.slot, r.member)
  end

  local function fail(r, failures)
    wrote = true
    redis.call('HSET', r.run, 'state', 'failed', 'failures', failures, 'reason', 'max_attempts',
      'finished_ms', now, 'expires_ms', '')
    redis.call('PEXPIRE', r.run, retention)
    redis.call('ZREM', active, r.member)
  end

  local function lease(r, failures, attempt, max_attempts)
    wrote = true
    local token = next_token()
    redis.call('HSET', r.run, 'state', 'running', 'attempt', attempt + 1, 'failures', failures,
      'max_attempts', max_attempts, 'token', string.format('%.0f', token), 'owner', r.owner,
      'expires_ms', now + r.lease, 'reason', '', 'started_ms', '')
    redis.call('PEXPIRE', r.run, retention + r.lease)
    if attempt == 0 then
      redis.call('ZADD', active, r.slot, r.member)
      redis.call('ZADD', slots, r.slot, r.member)
    end
    return string.format('won %d %.0f', attempt + 1, token)
  end

  local function acquire(r)
    local f = redis.call('HMGET', r.run, 'state', 'expires_ms', 'failures', 'max_attempts',
      'attempt')
    local state = f[1]
    if not state then
      if r.stale and now - r.slot > r.stale then
        skip(r, 'stale')
        return 'stale 0 0'
      end
      if r.overlap and other_live(r.member) then
        skip(r, 'overlap')
        return 'overlap 0 0'
      end
      return lease(r, 0, 0, r.max_attempts)
    end
    if state ~= 'running' and state ~= 'pending' then
      return 'finished 0 0'
    end
    local failures = tonumber(f[3])
    if state == 'running' then
      if (tonumber(f[2]) or 0) > now then
        return 'held 0 0'
      end
      failures = failures + 1 -- the runner stopped heartbeating: its attempt counts as failed
    end
    if failures >= tonumber(f[4]) then
      fail(r, failures)
      return 'exhausted 0 0'
    end
    return lease(r, failures, tonumber(f[5]), tonumber(f[4]))
  end

  table.insert(results, stored and '0' or '1')
  local longest = 0
  for i = first, first + 2 * (count - 1), 2 do
    local member, slot, lease_ms, max_attempts, overlap, stale =
      string.match(ARGV[i], '^(%S+) (%d+) (%d+) (%d+) ([01]) (%S*)$')
    local r = {
      run = base .. 'run:' .. member, member = member, slot = tonumber(slot),
      lease = tonumber(lease_ms), max_attempts = tonumber(max_attempts),
      overlap = overlap == '1', stale = tonumber(stale), owner = ARGV[i + 1],
    }
    table.insert(results, acquire(r))
    longest = math.max(longest, r.lease)
  end
  if not wrote then
    return -- most likely another instance was first, and did what follows
  end
  redis.call('SET', token_key, string.format('%.0f', last_token), 'KEEPTTL')
  trim(base, now, retention)
  -- The job's keys outlive its records (give or take the minute renew() allows); they are
  -- renewed together, so one of them tells when.
  local ttl = retention + longest
  if redis.call('PTTL', slots) < ttl - math.min(60000, ttl / 2) then
    for _, key in ipairs({token_key, active, slots}) do
      redis.call('PEXPIRE', key, ttl)
    end
  end
end

local at = 2
for _, base in ipairs(KEYS) do
  local count = tonumber(ARGV[at])
  decide_job(base, at + 1, count)
  at = at + 1 + 2 * count
end
return table.concat(results, ' ')
