-- live: the runs another instance may lease now, from the index of live runs (not on Cluster).
-- KEYS: <prefix>live, <prefix>live:version, <prefix>jobs. ARGV: the most members to return,
-- 'ro' to write nothing (else 'rw'), the index's version.
-- Returns the keys of runs whose index score (0 for pending, else the lease's expiry) is now or
-- earlier, pending first; or nil if the index was never built for this store (its version key is
-- missing, as in a store written before the index existed): the caller then reads every job once,
-- which builds it. A store that has no job yet has no run to index: it is marked built at once.

local now = clock()
if redis.call('EXISTS', KEYS[2]) == 0 then
  if ARGV[2] == 'ro' or redis.call('EXISTS', KEYS[3]) == 1 then
    return false
  end
  redis.call('SET', KEYS[2], ARGV[3])
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
