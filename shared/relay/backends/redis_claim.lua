-- Claim one run: write its key only if it is absent, expiring after ARGV[2] milliseconds.
-- KEYS[1] the run's key; ARGV[1] who claims it; ARGV[2] retention in ms. Returns 1 won, 0 lost.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
