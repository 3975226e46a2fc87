-- RENEW: extend a lease still held by this token (call or undo lease).
--
-- KEYS
--   1 lease    the lease (Keys.lease, or Keys.undo_lease for an undo)
--   2 running  its index by lease end (Keys.running, or Keys.undoing)
-- ARGV
--   1 call_id   2 token   3 lease_ms   4 now_ms
-- Returns 1 (renewed) | 0 (the lease is no longer this token's).
local lease, running = KEYS[1], KEYS[2]
local call_id, token, lease_ms, now_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if redis.call('GET', lease) ~= token then return 0 end
redis.call('PEXPIRE', lease, lease_ms)
redis.call('ZADD', running, tonumber(now_ms) + tonumber(lease_ms), call_id)
return 1
