-- Create a job's IDMP stream once, with the retention every instance relies on.
-- XCFGSET clears the stream's idempotency map, so it must only ever run on a new stream:
-- the check and the creation are one atomic step. KEYS[1] the stream; ARGV[1] seconds the
-- idempotent ids are kept; ARGV[2] how many ids are kept per producer. Returns 1 if created.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('XADD', KEYS[1], '0-1', 'created', '1')
redis.call('XCFGSET', KEYS[1], 'IDMP-DURATION', ARGV[1], 'IDMP-MAXSIZE', ARGV[2])
return 1
