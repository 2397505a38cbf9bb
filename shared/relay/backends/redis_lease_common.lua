-- Helpers shared by Relay's Redis lease scripts; prepended to each script when it is loaded.
--
-- Keys of one job share the hash tag {job}: <prefix>{job}:token, :active, :slots and one hash per
-- run, <prefix>{job}:run:<slot>. A script is given the job's base key, <prefix>{job}:, as its only
-- key and names the others from it: they hash to the same Cluster slot. Every time is read here
-- with TIME: the server's clock decides expiry. Times are milliseconds since the epoch; a field
-- that has no value holds ''. Writes cost more than reads in a script, so TTLs are renewed only
-- when they run low.
--
-- active: the runs that are not final (running or pending), score = slot.
-- slots:  every run with a record, score = slot.
--
-- One key is not a job's: <prefix>live, the runs that are live in every job (pending: score 0;
-- running: score = its lease's expiry), member = the run's key. It makes a sweep read only the
-- runs another instance may lease. A script is given it after the job's keys and keeps it in the
-- same step as the run; on Redis Cluster it would sit in another slot, so it is not given (nil)
-- and not kept.

local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), us
end

-- Make a key live about `ttl` ms more, writing only when it has less than `ttl` - a minute;
-- returns the ms it has left.
local function renew(key, ttl)
  local left = redis.call('PTTL', key)
  if left < ttl - math.min(60000, ttl / 2) then
    redis.call('PEXPIRE', key, ttl)
    return ttl
  end
  return left
end

-- renew() a running run's record and its job's active runs, but only once the record's field
-- kept_ms (when its TTL runs out, as the last renewal left it) says it runs low: a heartbeat
-- reads no TTL most of the time. Returns the kept_ms to record.
local function keep(base, run, now, ttl, kept_ms)
  local kept = tonumber(kept_ms) or 0
  if kept - now >= ttl - math.min(60000, ttl / 2) then
    return kept
  end
  local left = renew(run, ttl)
  renew(base .. 'active', ttl)
  return now + left
end

-- Record in the index of live runs (if kept) that the run is live from `score`, or (nil) not live.
local function index(live, run, score)
  if not live then
    return
  end
  if score then
    redis.call('ZADD', live, score, run)
  else
    redis.call('ZREM', live, run)
  end
end

-- Drop from the indexes old runs whose records have expired, `most` (default two) per call. A
-- record lives `retention` after its last write, which comes after its slot: only runs whose slot
-- is older than that can be gone, and usually there are none, so this costs one read.
local function trim(base, now, retention, live, most)
  local old = redis.call('ZRANGEBYSCORE', base .. 'slots', '-inf', now - retention, 'LIMIT', 0,
    most or 2)
  for _, member in ipairs(old) do
    if redis.call('EXISTS', base .. 'run:' .. member) == 0 then
      redis.call('ZREM', base .. 'slots', member)
      redis.call('ZREM', base .. 'active', member)
      index(live, base .. 'run:' .. member, nil)
    end
  end
end

-- The newest slot run's member and slot, or nil: manual runs ('manual:<time>') are not slots.
local function newest_slot(base)
  local from = 0
  while true do
    local top = redis.call('ZREVRANGE', base .. 'slots', from, from + 7, 'WITHSCORES')
    if #top == 0 then
      return nil
    end
    for i = 1, #top, 2 do
      if string.sub(top[i], 1, 7) ~= 'manual:' then
        return top[i], top[i + 1]
      end
    end
    from = from + 8
  end
end

-- Another run of the job than `member` holds a lease live at `now`.
local function live_other(base, member, now)
  for _, other in ipairs(redis.call('ZRANGE', base .. 'active', 0, -1)) do
    if other ~= member then
      local f = redis.call('HMGET', base .. 'run:' .. other, 'state', 'expires_ms')
      if f[1] == 'running' and tonumber(f[2]) > now then
        return true
      end
    end
  end
  return false
end

-- The run's fields (state, token, then `extra` or failures, max_attempts, owner, started_ms,
-- attempt) if `token` holds its live-or-expired lease, else nil and why it does not.
local function held(run, token, extra)
  extra = extra or {'failures', 'max_attempts', 'owner', 'started_ms', 'attempt'}
  local f = redis.call('HMGET', run, 'state', 'token', unpack(extra))
  if not f[1] then
    return nil, {'lost', 'none'}
  end
  if tonumber(f[2]) ~= token then
    return nil, {'lost', 'token', f[2]}
  end
  if f[1] ~= 'running' then
    return nil, {'lost', 'state', f[1]}
  end
  return f
end
