-- UNDO_RESEND: the sweeper's re-send of an undo still requested (its message lost or
-- stranded). Includes lib/push.lua.
--
-- KEYS
--   1 call         the call's record (Keys.call)
--   2 queue        the queue the undo message goes to (Publisher names it)
--   3 pushes       the queue's push counter (Keys.queue_pushes)
--   4 undo_queued  undos pushed, by push time (Keys.undo_queued)
--   5 suspect      the lost-undo suspicion mark (Keys.lost_undo_suspect)
-- ARGV
--   1 call_id  the call's id
--   2 message  the undo message
--   3 now      (s)
-- Returns 1 (pushed) | 0 (no longer requested: only taken out of the index).
local call, queue, pushes, undo_queued, suspect = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local call_id, message, now = ARGV[1], ARGV[2], ARGV[3]

if redis.call('HGET', call, 'undo_state') ~= 'requested' then
  redis.call('ZREM', undo_queued, call_id)
  return 0
end
push_undo(queue, pushes, undo_queued, call, call_id, message, now)
redis.call('DEL', suspect)
return 1
