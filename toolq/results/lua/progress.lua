-- PROGRESS: a non-final event of a running call (progress, retrying).
-- Includes lib/emit.lua. Runs on the worker's hot path (DirectScripts).
--
-- KEYS
--   1 call        the call's record (Keys.call)
--   2 stream      the run's event stream (Keys.run_stream)
--   3 hook_types  event types webhooks want (Keys.webhook_events)
--   4 outbox      webhook outbox stream (Keys.webhook_outbox)
--   5 archive     finished calls for the history store (Keys.history_archive)
-- ARGV
--   1 call_id  the call's id
--   2 token    the worker's lease token
--   3 etype    the event's type
--   4 data     (JSON)
--   5 maxlen   the run stream's approximate length cap
--   6 now      (s)
--   7 run_id   the call's run
-- Returns {'ok', event_id} | {'stale'} (not running under this token).
local call, stream, hook_types, outbox = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local archive = KEYS[5]
local call_id, token, etype, data = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local maxlen, now, run_id = ARGV[5], ARGV[6], ARGV[7]

if redis.call('HGET', call, 'status') ~= 'running'
   or redis.call('HGET', call, 'token') ~= token then
  return {'stale'}
end
local emit = emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now)
return {'ok', emit(etype, data)}
