-- control: the control plane's steps on one job (relay.contract.LeaseBackend: pause, resume,
-- trigger, backfill, prune, register_jobs, jobs).
-- KEYS: the job's base key, <prefix>live (not on Redis Cluster). ARGV: op, retention_ms, then the op's arguments (below).
-- The job's control hash, <base>control, holds its registered spec and, while it is paused,
-- paused_ms, paused_by and paused_reason. It has no TTL: a pause lasts until a resume.

local base, live, op, retention = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local control = base .. 'control'
local now = clock()

-- The run's record as the read script returns it: member, slot, then its fields.
local function record(member)
  return {member, redis.call('ZSCORE', base .. 'slots', member),
    unpack(redis.call('HGETALL', base .. 'run:' .. member))}
end

-- Record a pending run never leased yet (attempt 0), with a reason; false if it has a record.
local function insert_pending(member, slot, reason)
  local run = base .. 'run:' .. member
  if redis.call('EXISTS', run) == 1 then
    return false
  end
  redis.call('HSET', run, 'state', 'pending', 'reason', reason, 'attempt', 0, 'failures', 0,
    'max_attempts', 1)
  redis.call('PEXPIRE', run, retention)
  redis.call('ZADD', base .. 'active', slot, member)
  redis.call('ZADD', base .. 'slots', slot, member)
  index(live, run, 0)
  return true
end

local function keep_indexes()
  renew(base .. 'active', retention)
  renew(base .. 'slots', retention)
end

if op == 'register' then -- ARGV[3]: the spec
  redis.call('HSET', control, 'spec', ARGV[3])
  return 1
elseif op == 'info' then
  return redis.call('HMGET', control, 'spec', 'paused_ms', 'paused_by', 'paused_reason')
elseif op == 'pause' then -- ARGV[3]: by, ARGV[4]: reason
  if redis.call('HEXISTS', control, 'paused_ms') == 1 then
    return 0
  end
  redis.call('HSET', control, 'paused_ms', now, 'paused_by', ARGV[3], 'paused_reason', ARGV[4])
  return 1
elseif op == 'resume' then -- ARGV[3]: the catch-up window in ms, or '-'
  redis.call('HDEL', control, 'paused_ms', 'paused_by', 'paused_reason')
  local window = tonumber(ARGV[3])
  local back = {}
  if not window then
    return back
  end
  local members = redis.call('ZRANGEBYSCORE', base .. 'slots', now - window, '+inf', 'WITHSCORES')
  for i = 1, #members, 2 do
    local run = base .. 'run:' .. members[i]
    local f = redis.call('HMGET', run, 'state', 'reason')
    if f[1] == 'skipped' and f[2] == 'paused' then
      redis.call('HSET', run, 'state', 'pending', 'reason', 'resumed', 'attempt', 0,
        'failures', 0, 'finished_ms', '')
      redis.call('PEXPIRE', run, retention)
      redis.call('ZADD', base .. 'active', members[i + 1], members[i])
      index(live, run, 0)
      table.insert(back, members[i])
    end
  end
  keep_indexes()
  return back
elseif op == 'trigger' then -- ARGV[3]: member, ARGV[4]: slot_ms, ARGV[5]: overlap_skip 1|0
  local member, slot = ARGV[3], tonumber(ARGV[4])
  local run = base .. 'run:' .. member
  if redis.call('EXISTS', run) == 0 then
    if ARGV[5] == '1' and live_other(base, member, now) then
      redis.call('HSET', run, 'state', 'skipped', 'reason', 'overlap', 'finished_ms', now)
      redis.call('PEXPIRE', run, retention)
      redis.call('ZADD', base .. 'slots', slot, member)
    else
      insert_pending(member, slot, 'manual')
    end
    keep_indexes()
  end
  return record(member)
elseif op == 'backfill' then -- ARGV[3]: reason, ARGV[4..]: member, slot_ms, member, slot_ms, ...
  local created = {}
  for i = 4, #ARGV, 2 do
    table.insert(created, insert_pending(ARGV[i], tonumber(ARGV[i + 1]), ARGV[3]) and 1 or 0)
  end
  keep_indexes()
  return created
elseif op == 'prune' then -- ARGV[3]: older_than_ms, ARGV[4]: limit
  -- The oldest runs by slot: delete those finished before the cutoff, but never the job's
  -- latest slot run; drop from the indexes runs whose record already expired.
  local cutoff, limit = now - tonumber(ARGV[3]), tonumber(ARGV[4])
  local latest = newest_slot(base)
  local deleted = 0
  for _, member in ipairs(redis.call('ZRANGE', base .. 'slots', 0, limit - 1)) do
    local run = base .. 'run:' .. member
    local f = redis.call('HMGET', run, 'state', 'finished_ms')
    local final = f[1] == 'succeeded' or f[1] == 'failed' or f[1] == 'skipped'
    if not f[1] or (final and member ~= latest and (tonumber(f[2]) or now) < cutoff) then
      redis.call('DEL', run)
      redis.call('ZREM', base .. 'slots', member)
      redis.call('ZREM', base .. 'active', member)
      index(live, run, nil)
      deleted = deleted + 1
    end
  end
  -- 1 when nothing of the job is left: the caller removes it from the set of job names.
  local gone = 0
  if redis.call('EXISTS', base .. 'slots', base .. 'token', control) == 0 then
    gone = 1
  end
  return {deleted, gone}
end
return redis.error_reply('unknown control step ' .. tostring(op))
