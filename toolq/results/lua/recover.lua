-- RECOVER: a running call whose lease expired (its worker died). Includes lib/emit.lua
-- and lib/sched.lua.
--
-- A call of a tool not marked idempotent may have had its side effect or not, whenever its
-- worker died (before or past its time limit, which is often shorter than the lease that
-- finds the death): it becomes 'unknown', parked in the unknown set (no TTL) until a person
-- resolves it (resolve.lua), and is never queued again here nor made failed (a failed call
-- can be retried without a person). Its lost runner's token is kept ('lost_token'): should
-- that runner finish after all (it hung, it was cut off), finish.lua settles the call.
-- An idempotent call past its time limit failed with a timeout; recovered fewer than
-- max_recoveries times it is queued again (into the unsent set: the sweeper sends it);
-- recovered that often it failed as worker_lost. A scheduled call frees its slots, and when
-- queued again goes back to the front of its backlog (not to the unsent set): it is
-- admitted again.
-- A member of a scheduled group has no message of its own: it goes to the unsent set, and
-- the sweeper sends it alone (admitted: such calls have no limits).
--
-- KEYS
--   1 call        the call's record (Keys.call)
--   2 lease       the execution lease (Keys.lease)
--   3 running     running calls by lease end (Keys.running)
--   4 stream      the run's event stream (Keys.run_stream)
--   5 unsent      calls whose message is not sent yet (Keys.unsent)
--   6 hook_types  event types webhooks want (Keys.webhook_events)
--   7 outbox      webhook outbox stream (Keys.webhook_outbox)
--   8 archive     finished calls for the history store (Keys.history_archive)
--   9 unknown     calls of unknown outcome, by when lost (Keys.unknown)
-- ARGV
--   1 call_id         the call's id
--   2 now             (s)
--   3 maxlen          the run stream's approximate length cap
--   4 ttl             (s)
--   5 max_recoveries  requeues before the call fails
--   6 lost_result     (JSON, error_type worker_lost)
--   7 timeout_result  (JSON, error_type timeout)
--   8 run_id          the call's run
--   9 unknown_result  (JSON, error_type outcome_unknown)
-- Returns {'requeue'} | {'failed'} | {'unknown'} | {'timeout'} | {'alive'} (lease held) |
--   {'gone'}.
local call, lease, running, stream, unsent = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local hook_types, outbox = KEYS[6], KEYS[7]
local archive, unknown = KEYS[8], KEYS[9]
local call_id, now, maxlen, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local max_recoveries, lost_result, timeout_result, run_id = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local unknown_result = ARGV[9]

if redis.call('EXISTS', lease) == 1 then return {'alive'} end
local f = redis.call('HMGET', call, 'status', 'idempotent', 'recoveries', 'timeout',
                    'started_at', 'limits', 'lane', 'backlog', 'message', 'carries', 'token')
redis.call('ZREM', running, call_id)
if f[1] ~= 'running' then return {'gone'} end
local emit = emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now)
local t = tonumber(now)
local limits = sched_limits(f[6])
if limits then sched_release(limits, call_id, t * 1000) end
local timeout, started = tonumber(f[4]), tonumber(f[5])
local outcome, result = 'failed', lost_result
if f[2] == '1' and timeout and started and t - started >= timeout then
  outcome, result = 'timeout', timeout_result
elseif f[2] == '1' and tonumber(f[3] or '0') < tonumber(max_recoveries) then
  redis.call('HSET', call, 'status', 'queued', 'token', '', 'updated_at', now)
  redis.call('HINCRBY', call, 'recoveries', 1)
  sched_requeue(call, call_id, f[7], f[8], f[9], f[10], unsent, now)
  emit('call.retrying',
       '{"status":"queued","reason":"worker lost during execution; re-running idempotent call"}')
  return {'requeue'}
elseif f[2] ~= '1' then
  -- the lost runner's token: should it finish after all, its outcome settles the call
  redis.call('HSET', call, 'status', 'unknown', 'result', unknown_result, 'token', '',
             'updated_at', now, 'lost_at', now, 'lost_token', f[11] or '')
  redis.call('ZADD', unknown, now, call_id)
  emit('call.unknown', '{"status":"unknown","reason":"worker lost during execution"}')
  return {'unknown'}
end
redis.call('HSET', call, 'status', 'failed', 'result', result, 'token', '',
           'updated_at', now, 'finished_at', now)
redis.call('EXPIRE', call, ttl)
emit('call.failed', '{"status":"failed"}')
return {outcome}
