-- schedules: the stored schedules' steps (relay.schedule_store), each one atomic.
-- KEYS: the schedules' base key, <prefix>{relay:schedules}:. Every key below starts with it, so
-- they share one hash tag and one Redis Cluster slot: a change writes the row, its history entry
-- and the store-wide revision in one script, and a script may only touch one slot.
--   rows:        hash, name -> the row as JSON (definition '' and removed true once removed)
--   feed:        sorted set, name -> revision of its last change (the revision feed)
--   rev:         the store-wide revision
--   hist:<name>: hash, version -> the change as JSON
-- ARGV: op, then the op's arguments:
--   add name definition changes by | update name definition changes by version |
--   remove name changes by version ('' for any) | get name | all | since revision limit |
--   history name
-- A change returns {'ok', row}, {'conflict', row} (nothing written) or {'missing'}.

local base, op = KEYS[1], ARGV[1]
local rows, feed = base .. 'rows', base .. 'feed'

if op == 'get' then
  return redis.call('HMGET', rows, ARGV[2])[1]
elseif op == 'all' then
  return redis.call('HGETALL', rows)
elseif op == 'history' then
  return redis.call('HGETALL', base .. 'hist:' .. ARGV[2])
elseif op == 'since' then
  local names = redis.call('ZRANGEBYSCORE', feed, '(' .. ARGV[2], '+inf', 'LIMIT', 0, ARGV[3])
  local found = {}
  for i, name in ipairs(names) do
    found[i] = redis.call('HMGET', rows, name)[1]
  end
  return found
end

local name = ARGV[2]
local raw = redis.call('HMGET', rows, name)[1]
local current = raw and cjson.decode(raw) or nil
local definition, changes, by, expected
if op == 'remove' then
  definition, changes, by, expected = '', ARGV[3], ARGV[4], ARGV[5]
else
  definition, changes, by, expected = ARGV[3], ARGV[4], ARGV[5], ARGV[6] or ''
end
local exists = current ~= nil and not current.removed
if op == 'add' then
  if exists then
    return {'conflict', raw}
  end
elseif not exists then
  return {'missing'}
elseif expected ~= '' and tonumber(expected) ~= current.version then
  return {'conflict', raw}
end

local now = clock()
local revision = tonumber(redis.call('GET', base .. 'rev') or '0') + 1
redis.call('SET', base .. 'rev', revision)
local version = current and current.version + 1 or 1
local created = (op == 'add' or not current) and now or current.created_ms
local row = cjson.encode({name = name, definition = definition, removed = op == 'remove',
  version = version, revision = revision, updated_ms = now, updated_by = by,
  created_ms = created})
redis.call('HSET', rows, name, row)
redis.call('ZADD', feed, revision, name)
redis.call('HSET', base .. 'hist:' .. name, version, cjson.encode({version = version,
  at_ms = now, by = by, action = op, changes = changes}))
return {'ok', row}
