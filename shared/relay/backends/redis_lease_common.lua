-- Helpers shared by Relay's Redis lease scripts; prepended to each script when it is loaded.
--
-- Keys of one job share the hash tag {job}: <prefix>{job}:token, :active, :slots, :purge and one
-- hash per run, <prefix>{job}:run:<slot>. A script is given the job's base key, <prefix>{job}:, as
-- its only key and names the others from it: they hash to the same Cluster slot. Every time is
-- read here with TIME: the server's clock decides expiry. Times are milliseconds since the epoch.
--
-- active: runs that are not final; score = lease expiry (running) or 0 (pending).
-- slots:  every run with a record; score = slot in ms.
-- purge:  every run; score = when its hash expires, so the indexes can drop it then too.

local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), us
end

-- Keep a key at least ttl ms longer (never shorten: an index must outlive its members).
local function extend(key, ttl)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- The run's hash lives ttl ms more; the purge index says when, so indexes can drop it then.
local function keep(run, purge, member, now, ttl)
  redis.call('PEXPIRE', run, ttl)
  redis.call('ZADD', purge, now + ttl, member)
  extend(purge, ttl)
end

-- Drop from the indexes the runs whose hashes have expired (a bounded number per call).
local function trim(active, slots, purge, now)
  local old = redis.call('ZRANGEBYSCORE', purge, '-inf', now, 'LIMIT', 0, 100)
  if #old > 0 then
    redis.call('ZREM', active, unpack(old))
    redis.call('ZREM', slots, unpack(old))
    redis.call('ZREM', purge, unpack(old))
  end
end

-- The run's fields if `token` holds its live-or-expired lease, else nil and why it does not.
local function held(run, token)
  local f = redis.call('HMGET', run, 'state', 'token', 'failures', 'max_attempts', 'owner',
    'started_ms', 'attempt')
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
