-- acquire: decide runs in order, one step per call (the rules of relay.lease_rules).
-- KEYS: one base key per job (one job on Redis Cluster, where a script stays in one slot), then
-- <prefix>live unless on Redis Cluster.
-- ARGV: retention_ms, the owner, then one string: per job one block of lines, one line per
-- request, the blocks separated by '|':
-- "<member> <slot_ms> <lease_ms> <max_attempts> <overlap> <stale_after_ms or -> <version or ->",
-- where overlap is 0 (allow), 1 (skip) or 2 (buffer_one), version the stored schedule's (written
-- on a record it creates, or on a record leased for the first time that has none: a takeover or
-- a retry keeps the first); a manual run's member is 'manual:<time>'.
-- (One string, not one argument per job or per field: packing arguments is most of a client's
-- work in a tick of thousands of jobs.)
-- Returns one string (cheaper for the client to read than nested arrays): per job new_job, then
-- per request outcome, attempt, token and the run's schedule version ('-': none), all separated
-- by spaces. new_job is 1 if the job had no token when one of its runs was leased (a new job, or
-- a server that lost its keys): the caller then lists the job.
-- Old runs are trimmed from the indexes by the other steps (finish, skip, read), not here.

local retention, owner = tonumber(ARGV[1]), ARGV[2]
local blocks = {}
for block in string.gmatch(ARGV[3], '[^|]+') do
  table.insert(blocks, block)
end
local jobs = #blocks
local live = KEYS[jobs + 1]
local now, now_us = clock()
local results = {}

-- Another run of the job holds a live lease.
local function other_live(base, member)
  return live_other(base, member, now)
end

-- Another run of the job waits for the live one to end (pending, reason buffered).
local function waiting(base)
  for _, other in ipairs(redis.call('ZRANGE', base .. 'active', 0, -1)) do
    local f = redis.call('HMGET', base .. 'run:' .. other, 'state', 'reason')
    if f[1] == 'pending' and f[2] == 'buffered' then
      return true
    end
  end
  return false
end

-- The job is paused: read once per job and call, and only when a new run needs it.
local function paused(job)
  if job.paused == nil then
    job.paused = redis.call('HEXISTS', job.base .. 'control', 'paused_ms') == 1
  end
  return job.paused
end

-- Record a run that waits (buffer_one): pending, never leased.
local function buffer(job, run, member, slot, max_attempts, version)
  job.wrote = true
  redis.call('HSET', run, 'state', 'pending', 'reason', 'buffered', 'attempt', 0, 'failures', 0,
    'max_attempts', max_attempts)
  if version then
    redis.call('HSET', run, 'schedule_version', version)
  end
  redis.call('PEXPIRE', run, retention)
  redis.call('ZADD', job.base .. 'active', slot, member)
  redis.call('ZADD', job.base .. 'slots', slot, member)
  index(live, run, 0)
end

local function skip(base, run, member, slot, reason)
  redis.call('HSET', run, 'state', 'skipped', 'reason', reason, 'finished_ms', now)
  redis.call('PEXPIRE', run, retention)
  redis.call('ZADD', base .. 'slots', slot, member)
end

-- Lease the run (new, or again): a new token, the next attempt. `recorded`: the run has a record
-- (attempt 0: a pending run never leased, which takes the request's max_attempts).
local function lease(job, run, member, slot, lease_ms, failures, attempt, max_attempts, recorded,
                     version)
  job.wrote = true
  if not job.last_token then
    local stored = redis.call('GET', job.base .. 'token')
    if not stored then
      results[job.flag_at] = '1' -- a new job, or one whose keys the server lost
    end
    job.last_token = tonumber(stored or '0')
  end
  -- A new token grows strictly, and stays above every token handed out before a restart that
  -- lost the counter: it is at least the server's time in microseconds.
  job.last_token = math.max(job.last_token + 1, now_us)
  local token = string.format('%.0f', job.last_token)
  if version then -- the record's own, if it has one (see acquire)
    redis.call('HSET', run, 'schedule_version', version)
  end
  if not recorded then
    redis.call('HSET', run, 'state', 'running', 'attempt', 1, 'failures', 0,
      'max_attempts', max_attempts, 'token', token, 'owner', owner, 'expires_ms', now + lease_ms,
      'kept_ms', now + retention + lease_ms)
    redis.call('ZADD', job.base .. 'active', slot, member)
    redis.call('ZADD', job.base .. 'slots', slot, member)
  else
    redis.call('HSET', run, 'state', 'running', 'attempt', attempt + 1, 'failures', failures,
      'token', token, 'owner', owner, 'expires_ms', now + lease_ms, 'reason', '', 'started_ms', '',
      'max_attempts', max_attempts, 'kept_ms', now + retention + lease_ms)
  end
  redis.call('PEXPIRE', run, retention + lease_ms)
  index(live, run, now + lease_ms)
  return 'won ' .. (attempt + 1) .. ' ' .. token .. ' ' .. (version or '-')
end

local function acquire(job, member, slot, lease_ms, max_attempts, overlap, stale, version)
  local base = job.base
  local run = base .. 'run:' .. member
  local f = redis.call('HMGET', run, 'state', 'expires_ms', 'failures', 'max_attempts', 'attempt',
    'reason', 'schedule_version')
  local state = f[1]
  if not state then
    if stale and now - slot > stale then
      job.wrote = true
      skip(base, run, member, slot, 'stale')
      return 'stale 0 0 -'
    end
    if paused(job) then
      job.wrote = true
      skip(base, run, member, slot, 'paused')
      return 'paused 0 0 -'
    end
    if overlap ~= '0' and other_live(base, member) then
      if overlap == '2' and not waiting(base) then
        buffer(job, run, member, slot, max_attempts, version)
        return 'buffered 0 0 -'
      end
      job.wrote = true
      skip(base, run, member, slot, 'overlap')
      return 'overlap 0 0 -'
    end
    return lease(job, run, member, slot, lease_ms, 0, 0, max_attempts, false, version)
  end
  if state ~= 'running' and state ~= 'pending' then
    return 'finished 0 0 -'
  end
  local failures = tonumber(f[3])
  if state == 'running' then
    if (tonumber(f[2]) or 0) > now then
      return 'held 0 0 -'
    end
    failures = failures + 1 -- the runner stopped heartbeating: its attempt counts as failed
  elseif f[6] == 'buffered' and other_live(base, member) then
    return 'buffered 0 0 -'
  end
  local attempt = tonumber(f[5])
  local limit = attempt == 0 and max_attempts or tonumber(f[4])
  if failures >= limit then
    job.wrote = true
    redis.call('HSET', run, 'state', 'failed', 'failures', failures, 'reason', 'max_attempts',
      'finished_ms', now, 'expires_ms', '')
    redis.call('PEXPIRE', run, retention)
    redis.call('ZREM', base .. 'active', member)
    index(live, run, nil)
    return 'exhausted 0 0 -'
  end
  -- A takeover or a retry keeps the version of the record's first lease.
  return lease(job, run, member, slot, lease_ms, failures, attempt, limit, true, f[7] or version)
end

-- The job's token counter is read only when a lease needs it: a run found held, the common case
-- for all instances but the first, costs one read.
local function decide_job(base, block)
  table.insert(results, '0')
  local job = {base = base, wrote = false, last_token = nil, flag_at = #results}
  local longest = 0
  for member, slot, lease_ms, max_attempts, overlap, stale, version in
      string.gmatch(block, '(%S+) (%d+) (%d+) (%d+) ([012]) (%S+) (%S+)') do
    lease_ms = tonumber(lease_ms)
    table.insert(results, acquire(job, member, tonumber(slot), lease_ms, tonumber(max_attempts),
      overlap, tonumber(stale), version ~= '-' and version or nil))
    longest = math.max(longest, lease_ms)
  end
  if not job.wrote then
    return -- most likely another instance was first, and did what follows
  end
  local token_key = base .. 'token'
  if job.last_token then
    redis.call('SET', token_key, string.format('%.0f', job.last_token), 'KEEPTTL')
  end
  -- The job's keys outlive its records (give or take the minute renew() allows); they are
  -- renewed together, so one of them tells when.
  local ttl = retention + longest
  if redis.call('PTTL', base .. 'slots') < ttl - math.min(60000, ttl / 2) then
    for _, key in ipairs({token_key, base .. 'active', base .. 'slots'}) do
      redis.call('PEXPIRE', key, ttl)
    end
  end
end

for i = 1, jobs do
  decide_job(KEYS[i], blocks[i])
end
return table.concat(results, ' ')
