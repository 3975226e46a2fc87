-- RESOLVE: a person's outcome for a call of unknown outcome (lost with its worker mid-call,
-- recover.lua), one compare-and-set, so of racing approvers exactly one wins. Includes
-- lib/emit.lua and lib/sched.lua.
--
-- Only a call still 'unknown' and still at the attempt the deciding process read (and
-- signed) is resolved. 'succeeded' and 'failed' end it with the given result; 'rerun'
-- queues it again for a new attempt (into the unsent set: the sweeper sends it; a
-- scheduled call goes back to the front of its backlog, as recover.lua does), and a worker
-- runs that attempt only with the signed resolution stored here (ResolutionGuard). The
-- caller audits the outcome it gets (ApprovalStore's audit writer).
--
-- KEYS
--   1 call        the call's record (Keys.call)
--   2 stream      the run's event stream (Keys.run_stream)
--   3 unknown     calls of unknown outcome, by when lost (Keys.unknown)
--   4 unsent      calls whose message is not sent yet (Keys.unsent)
--   5 hook_types  event types webhooks want (Keys.webhook_events)
--   6 outbox      webhook outbox stream (Keys.webhook_outbox)
--   7 archive     finished calls for the history store (Keys.history_archive)
-- ARGV
--   1 call_id     the call's id
--   2 outcome     succeeded | failed | rerun
--   3 by          the approver
--   4 now         (s)
--   5 maxlen      the run stream's approximate length cap
--   6 ttl         (s)
--   7 result      the final result (JSON; '' for rerun)
--   8 resolution  the signed resolution (JSON)
--   9 data        the event's data (JSON)
--   10 run_id     the call's run
--   11 attempt    the attempt the resolution was made for (the lost one)
--   12 etype      the final event's type (call.succeeded | call.failed; '' for rerun)
-- Returns {'ok', event_id} | {'missing'} | {'conflict', status} | {'retry'} (attempt moved).
local call, stream, unknown, unsent = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local hook_types, outbox, archive = KEYS[5], KEYS[6], KEYS[7]
local call_id, outcome, by, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local maxlen, ttl, result, resolution = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local data, run_id, attempt, etype = ARGV[9], ARGV[10], ARGV[11], ARGV[12]

local f = redis.call('HMGET', call, 'status', 'attempt', 'lane', 'backlog', 'message', 'carries')
if not f[1] then return {'missing'} end
if f[1] ~= 'unknown' then return {'conflict', f[1]} end
if (f[2] or '0') ~= attempt then return {'retry'} end
local emit = emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now)
redis.call('ZREM', unknown, call_id)
redis.call('HDEL', call, 'lost_token')  -- the person's outcome stands over a late runner's
if outcome == 'rerun' then
  redis.call('HSET', call, 'status', 'queued', 'token', '', 'updated_at', now,
             'resolution', resolution, 'resolved_by', by)
  redis.call('HDEL', call, 'result')
  sched_requeue(call, call_id, f[3], f[4], f[5], f[6], unsent, now)
  return {'ok', emit('call.retrying', data)}
end
redis.call('HSET', call, 'status', outcome, 'result', result, 'updated_at', now,
           'finished_at', now, 'resolution', resolution, 'resolved_by', by)
redis.call('EXPIRE', call, ttl)
return {'ok', emit(etype, data)}
