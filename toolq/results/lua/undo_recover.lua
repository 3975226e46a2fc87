-- UNDO_RECOVER: an undo whose worker died (its undo lease expired while undoing): failed
-- (worker_lost), or, for an idempotent tool recovered fewer than max_recoveries times,
-- requested again with a fresh message. Includes lib/emit.lua and lib/push.lua.
--
-- KEYS
--   1 call         the call's record (Keys.call)
--   2 undo_lease   the undo lease (Keys.undo_lease)
--   3 undoing      undos running, by lease end (Keys.undoing)
--   4 stream       the run's event stream (Keys.run_stream)
--   5 queue        the queue the undo message goes to (Publisher names it)
--   6 pushes       the queue's push counter (Keys.queue_pushes)
--   7 undo_queued  undos pushed, by push time (Keys.undo_queued)
--   8 hook_types   event types webhooks want (Keys.webhook_events)
--   9 outbox       webhook outbox stream (Keys.webhook_outbox)
--   10 archive     finished calls for the history store (Keys.history_archive)
-- ARGV
--   1 call_id         the call's id
--   2 now             (s)
--   3 maxlen          the run stream's approximate length cap
--   4 max_recoveries  requeues before the undo fails
--   5 lost_data       call.undo_failed event JSON, error_type worker_lost
--   6 message         ('' = never requeue)
--   7 run_id          the call's run
-- Returns 'requeue' | 'failed' | 'alive' (lease held) | 'gone' (not undoing).
local call, undo_lease, undoing, stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local queue, pushes, undo_queued, hook_types, outbox = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local archive = KEYS[10]
local call_id, now, maxlen = ARGV[1], ARGV[2], ARGV[3]
local max_recoveries, lost_data, message, run_id = ARGV[4], ARGV[5], ARGV[6], ARGV[7]

if redis.call('EXISTS', undo_lease) == 1 then return 'alive' end
redis.call('ZREM', undoing, call_id)
local f = redis.call('HMGET', call, 'undo_state', 'idempotent', 'undo_recoveries')
if f[1] ~= 'undoing' then return 'gone' end
if f[2] == '1' and tonumber(f[3] or '0') < tonumber(max_recoveries) and message ~= '' then
  redis.call('HSET', call, 'undo_state', 'requested', 'undo_token', '')
  redis.call('HINCRBY', call, 'undo_recoveries', 1)
  push_undo(queue, pushes, undo_queued, call, call_id, message, now)
  return 'requeue'
end
redis.call('HSET', call, 'undo_state', 'failed', 'undo_token', '', 'undo_finished_at', now)
redis.call('HDEL', call, 'undo_approval')  -- (as UNDO_FINISH: it was for this undo)
local emit = emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now)
emit('call.undo_failed', lost_data)
return 'failed'
