-- instance: record one instance's heartbeat, on the server's clock; or, with no ARGV, read them.
-- KEYS: the hash of instances, <prefix>instances. ARGV: owner, its fields as JSON, ttl_ms.
-- Reading returns {now_ms, HGETALL} from the node that holds the hash, so expiry is judged on the
-- clock that wrote it (a Cluster has one clock per node, and refuses TIME in a pipeline).
-- Each field holds the instance's JSON with beat_ms and expires_ms added. Expired fields are
-- dropped here, and the hash itself expires with its longest-lived field: a store whose instances
-- all stopped keeps nothing of them.

local key = KEYS[1]
local now = clock()
if #ARGV == 0 then
  return {now, redis.call('HGETALL', key)}
end
local ttl = tonumber(ARGV[3])
local info = cjson.decode(ARGV[2])
info.beat_ms = now
info.expires_ms = now + ttl
redis.call('HSET', key, ARGV[1], cjson.encode(info))
local latest = now + ttl
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local expires = tonumber(cjson.decode(all[i + 1]).expires_ms) or 0
  if expires <= now then
    redis.call('HDEL', key, all[i])
  elseif expires > latest then
    latest = expires
  end
end
redis.call('PEXPIREAT', key, latest)
return 1
