-- schedules: the stored schedules' steps (relay.schedule_store), each one atomic.
-- KEYS: the schedules' base key, <prefix>{relay:schedules}:. Every key below starts with it, so
-- they share one hash tag and one Redis Cluster slot: a change writes the row, its history entry
-- and the store-wide revision in one script, and a script may only touch one slot.
--   rows:        hash, name -> the row as JSON (definition '' and removed true once removed)
--   feed:        sorted set, name -> revision of its last change (the revision feed)
--   rev:         the store-wide revision
--   hist:<name>: hash, version -> the change as JSON
--   removed:     sorted set, name -> when it was removed (ms), for retention; removed:indexed is
--                set once the rows removed before this index existed were added to it
-- ARGV: op, then the op's arguments:
--   add name definition changes by | update name definition changes by version |
--   remove name changes by version ('' for any) | get name | all | since revision limit |
--   history name | prune older_than_ms limit | batch writes by
-- A change returns {'ok', row}, {'conflict', row} (nothing written) or {'missing'}. prune deletes
-- the rows, feed entries and histories of up to limit schedules removed more than older_than_ms
-- ago and returns how many. batch takes a JSON list of changes, each [op, name, definition,
-- changes, version ('' for any)], checks them all, then writes them all with consecutive
-- revisions: {'ok', last revision}, or {'refused', position, row or nil} with nothing written.

local base, op = KEYS[1], ARGV[1]
local rows, feed = base .. 'rows', base .. 'feed'

-- The change `op` of schedule `name` (its row `current`, decoded, or nil) at `revision`.
local function write(op, name, definition, changes, by, current, revision, now)
  local version = current and current.version + 1 or 1
  local created = (op == 'add' or not current) and now or current.created_ms
  local row = cjson.encode({name = name, definition = definition, removed = op == 'remove',
    version = version, revision = revision, updated_ms = now, updated_by = by,
    created_ms = created})
  redis.call('HSET', rows, name, row)
  redis.call('ZADD', feed, revision, name)
  if op == 'remove' then
    redis.call('ZADD', base .. 'removed', now, name)
  elseif op == 'add' then
    redis.call('ZREM', base .. 'removed', name)
  end
  redis.call('HSET', base .. 'hist:' .. name, version, cjson.encode({version = version,
    at_ms = now, by = by, action = op, changes = changes}))
  return row
end

-- Whether change `op` (based on version `expected`, '' for any) may be made to row `current`.
local function allowed(op, current, expected)
  local exists = current ~= nil and not current.removed
  if op == 'add' then
    return not exists
  end
  return exists and (expected == '' or tonumber(expected) == current.version)
end

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
elseif op == 'prune' then
  local removed = base .. 'removed'
  if redis.call('EXISTS', removed .. ':indexed') == 0 then
    local all = redis.call('HGETALL', rows)
    for i = 2, #all, 2 do
      local row = cjson.decode(all[i])
      if row.removed then
        redis.call('ZADD', removed, row.updated_ms, row.name)
      end
    end
    redis.call('SET', removed .. ':indexed', 1)
  end
  local cutoff = clock() - tonumber(ARGV[2])
  local names = redis.call('ZRANGEBYSCORE', removed, '-inf', '(' .. cutoff, 'LIMIT', 0, ARGV[3])
  for _, name in ipairs(names) do
    redis.call('HDEL', rows, name)
    redis.call('ZREM', feed, name)
    redis.call('DEL', base .. 'hist:' .. name)
    redis.call('ZREM', removed, name)
  end
  return #names
elseif op == 'batch' then
  local writes, by, found = cjson.decode(ARGV[2]), ARGV[3], {}
  for i, w in ipairs(writes) do
    local raw = redis.call('HGET', rows, w[2])
    found[i] = raw and cjson.decode(raw) or false
    if not allowed(w[1], found[i] or nil, w[5]) then
      return {'refused', i, raw}
    end
  end
  local now = clock()
  local revision = tonumber(redis.call('GET', base .. 'rev') or '0')
  for i, w in ipairs(writes) do
    revision = revision + 1
    write(w[1], w[2], w[3], w[4], by, found[i] or nil, revision, now)
  end
  redis.call('SET', base .. 'rev', revision)
  return {'ok', revision}
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
if not allowed(op, current, expected) then
  return (op == 'add' or (current ~= nil and not current.removed)) and {'conflict', raw}
    or {'missing'}
end

local now = clock()
local revision = tonumber(redis.call('GET', base .. 'rev') or '0') + 1
redis.call('SET', base .. 'rev', revision)
return {'ok', write(op, name, definition, changes, by, current, revision, now)}
