-- UNDO_CLAIM: request a finished call's undo and push its message, in one step.
-- Includes lib/push.lua.
--
-- An undo moves through undo_state on the call's record: requested (its message pushed,
-- here) -> undoing (a worker holds the undo lease) -> undone | failed. A failed undo may be
-- requested again; an undone one never.
--
-- KEYS
--   1 call         the call's record (Keys.call)
--   2 undo         the call's undo data (Keys.undo)
--   3 queue        the queue the undo message goes to (Publisher names it)
--   4 pushes       the queue's push counter (Keys.queue_pushes)
--   5 undo_queued  undos pushed, by push time (Keys.undo_queued)
-- ARGV
--   1 call_id  the call's id
--   2 now      (s)
--   3 message  the undo message
--   4 approval the signed approval of this undo, or a JSON list of a quorum's ('' = none;
--              toolq.approvals.undoing), kept on the record (undo_approval) for the worker
-- Returns 'ok' | 'missing' | 'not_succeeded' (only a succeeded call's effect is undone) |
--   'in_progress' | 'undone' | 'nothing' (no undo data).
local call, undo, queue, pushes, undo_queued = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local call_id, now, message, approval = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local f = redis.call('HMGET', call, 'status', 'undo_state')
if not f[1] then return 'missing' end
if f[1] ~= 'succeeded' then return 'not_succeeded' end
local state = f[2]
if state == 'requested' or state == 'undoing' then return 'in_progress' end
if state == 'undone' then return 'undone' end
if redis.call('EXISTS', undo) == 0 then return 'nothing' end
redis.call('HSET', call, 'undo_state', 'requested', 'undo_requested_at', now, 'undo_token', '',
           'undo_approval', approval)
redis.call('HDEL', call, 'undo_votes')  -- a quorum's approvals waiting (UndoStore.vote): used
push_undo(queue, pushes, undo_queued, call, call_id, message, now)
return 'ok'
