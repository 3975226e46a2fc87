-- UNDO_START: a worker's claim on a requested undo: the undo lease and requested ->
-- undoing, so a second delivery of the message finds it no longer requested and does
-- nothing. A retry of the same claim (same token) gets the same answer.
--
-- KEYS
--   1 call         the call's record (Keys.call)
--   2 undo_lease   the undo lease (Keys.undo_lease)
--   3 undoing      undos running, by lease end (Keys.undoing)
--   4 undo_queued  undos pushed, by push time (Keys.undo_queued)
-- ARGV
--   1 call_id   the call's id
--   2 token     the worker's undo lease token
--   3 lease_ms  the lease's length (ms)
--   4 now       (s)
--   5 now_ms    (ms)
-- Returns {'ok'} | {'leased'} | {'skip', undo_state ('' = none)}.
local call, undo_lease, undoing, undo_queued = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local call_id, token, lease_ms, now, now_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local f = redis.call('HMGET', call, 'undo_state', 'undo_token')
if f[1] == 'undoing' and f[2] == token then return {'ok'} end
if f[1] ~= 'requested' then
  redis.call('ZREM', undo_queued, call_id)
  return {'skip', f[1] or ''}
end
if not redis.call('SET', undo_lease, token, 'NX', 'PX', lease_ms) then return {'leased'} end
redis.call('HSET', call, 'undo_state', 'undoing', 'undo_token', token, 'undo_started_at', now)
redis.call('ZADD', undoing, tonumber(now_ms) + tonumber(lease_ms), call_id)
redis.call('ZREM', undo_queued, call_id)
return {'ok'}
