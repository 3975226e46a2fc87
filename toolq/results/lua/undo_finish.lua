-- UNDO_FINISH: the end of an undo (undone | failed) with its event; the undo data goes once
-- undone. Includes lib/emit.lua.
--
-- KEYS
--   1 call        the call's record (Keys.call)
--   2 stream      the run's event stream (Keys.run_stream)
--   3 undo_lease  the undo lease (Keys.undo_lease)
--   4 undoing     undos running, by lease end (Keys.undoing)
--   5 undo        the call's undo data (Keys.undo)
--   6 hook_types  event types webhooks want (Keys.webhook_events)
--   7 outbox      webhook outbox stream (Keys.webhook_outbox)
--   8 archive     finished calls for the history store (Keys.history_archive)
-- ARGV
--   1 call_id  the call's id
--   2 token    the worker's undo lease token
--   3 state    undone | failed
--   4 etype    the event's type
--   5 data     (JSON)
--   6 maxlen   the run stream's approximate length cap
--   7 now      (s)
--   8 run_id   the call's run
-- Returns {'ok', event_id ('' for a repeat)} | {'stale'}.
local call, stream, undo_lease, undoing, undo = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local hook_types, outbox = KEYS[6], KEYS[7]
local archive = KEYS[8]
local call_id, token, state, etype, data = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local maxlen, now, run_id = ARGV[6], ARGV[7], ARGV[8]

local f = redis.call('HMGET', call, 'undo_state', 'undo_token')
if f[2] ~= token then return {'stale'} end
if f[1] == state then return {'ok', ''} end
if f[1] ~= 'undoing' then return {'stale'} end
redis.call('HSET', call, 'undo_state', state, 'undo_finished_at', now)
-- Its approval was for this undo: another needs its own (toolq.approvals.undoing).
redis.call('HDEL', call, 'undo_approval')
if redis.call('GET', undo_lease) == token then redis.call('DEL', undo_lease) end
redis.call('ZREM', undoing, call_id)
if state == 'undone' then redis.call('DEL', undo) end
local emit = emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now)
return {'ok', emit(etype, data)}
