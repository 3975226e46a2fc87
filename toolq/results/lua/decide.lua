-- DECIDE: a human's decision on a parked call, one compare-and-set, so exactly one of any
-- number of racing approvers wins. Includes lib/emit.lua, lib/push.lua, lib/sched.lua, lib/park.lua
-- and lib/audit.lua.
--
-- Past the deadline the call is expired here and then, not decided. The deciding process
-- reads the record, computes the digest of the stored arguments itself, signs the outcome it
-- will commit and passes the envelope and approvals it read: if the envelope changed since,
-- the decision is refused ('digest'); if the approvals did, nothing is written and the
-- caller reads again ('retry'). So the stored signature always matches what was committed.
-- An edit replaces the envelope and digest and resets the earlier approvals (they approved
-- other arguments). Refusals are returned for the caller to audit; the audit entries written
-- here carry signatures made by the caller (entry fields come from ARGV, so the signed bytes
-- are exactly the stored ones). The final approval pushes the call's message (as CREATE),
-- or, for a scheduled call, puts it in its backlog with its message (lib/sched.lua).
--
-- KEYS
--   1  call               the call's record (Keys.call)
--   2  stream             the run's event stream (Keys.run_stream)
--   3  pending_approvals  parked calls by deadline (Keys.pending_approvals)
--   4  unsent             calls whose message is not sent yet (Keys.unsent)
--   5  audit_stream       the approval audit stream (Keys.audit_stream)
--   6  queue              the queue the message goes to (Keys.unsent when there is none)
--   7  queued             calls pushed, by push time (Keys.queued)
--   8  pushes             the queue's push counter (Keys.queue_pushes; Keys.unsent if none)
--   9  hook_types         event types webhooks want (Keys.webhook_events)
--   10 outbox             webhook outbox stream (Keys.webhook_outbox)
--   11 archive            finished calls for the history store (Keys.history_archive)
--   12 parked             parked calls by parking time (Keys.parked)
--   13 tenant_parked      the tenant's parked calls (Keys.tenant_parked)
--   14 audit_chain        the audit chain's state (Keys.audit_chain)
-- ARGV
--   1  call_id          the call's id
--   2  kind             approve | deny
--   3  by               the approver
--   4  now              (s)
--   5  envelope_read    the envelope as read ('' = unchecked)
--   6  check_approvals  '1' = compare approvals
--   7  maxlen           the run stream's approximate length cap
--   8  ttl              (s)
--   9  data             the event's data (JSON)
--   10 result           (JSON of a denial)
--   11 new_envelope     the edited envelope ('' = unchanged)
--   12 audit_maxlen     the audit stream's approximate length cap
--   13 expired_result   (JSON)
--   14 message          ('' = leave it to the sweeper)
--   15 approvals_read   the approvals as read
--   16 approvals_new    the approvals to store
--   17 final            '1' | '0'
--   18 new_digest       ('' = unchanged)
--   19 approval         the signed decision
--   20 run_id           the call's run
--   21 tool             the tool's name
--   22 audit_sig        the audit entry's signature
--   23 expired_sig      the signature of an expiry audited instead
--   24 digest           of the decided arguments
--   25 shown            digest of the arguments as read
-- Returns {'ok', event_id} | {'partial', event_id} (approved, quorum not reached) |
--   {'expired'} | {'digest'} | {'retry'} | {'missing'} | {'conflict', status}.
local call, stream, pending_approvals, unsent, audit_stream =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local queue, queued, pushes, hook_types, outbox = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local archive = KEYS[11]
local call_id, kind, by, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local envelope_read, check_approvals = ARGV[5], ARGV[6]
local maxlen, ttl, data, result = ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local new_envelope, audit_maxlen, expired_result, message = ARGV[11], ARGV[12], ARGV[13], ARGV[14]
local approvals_read, approvals_new, final, new_digest = ARGV[15], ARGV[16], ARGV[17], ARGV[18]
local approval, run_id, tool = ARGV[19], ARGV[20], ARGV[21]
local audit_sig, expired_sig, digest, shown = ARGV[22], ARGV[23], ARGV[24], ARGV[25]
local parked, tenant_parked, audit_chain = KEYS[12], KEYS[13], KEYS[14]

local f = redis.call('HMGET', call, 'status', 'deadline', 'approvers', 'lane', 'backlog')
if not f[1] then return {'missing'} end
local emit = emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now)
local function audit(outcome, audited, sig)
  audit_append(audit_stream, audit_chain, audit_maxlen, {'call_id', call_id, 'run_id', run_id,
               'tool', tool, 'by', by, 'outcome', outcome, 'digest', audited, 'ts', now,
               'sig', sig})
end
if f[1] ~= 'awaiting_approval' then return {'conflict', f[1]} end
local deadline = tonumber(f[2])
if deadline and deadline > 0 and tonumber(now) > deadline then
  redis.call('HSET', call, 'status', 'expired', 'result', expired_result, 'updated_at', now,
             'finished_at', now)
  unpark(pending_approvals, parked, tenant_parked, call_id)
  redis.call('EXPIRE', call, ttl)
  emit('call.expired', '{"status":"expired"}')
  audit('expired', shown, expired_sig)
  return {'expired'}
end
if envelope_read ~= '' and envelope_read ~= redis.call('HGET', call, 'envelope') then
  return {'digest'}
end
if check_approvals == '1' and (f[3] or '') ~= approvals_read then return {'retry'} end
if kind == 'deny' then
  redis.call('HSET', call, 'status', 'denied', 'result', result, 'decided_by', by,
             'approval', approval, 'updated_at', now, 'finished_at', now)
  unpark(pending_approvals, parked, tenant_parked, call_id)
  redis.call('EXPIRE', call, ttl)
  audit('denied', digest, audit_sig)
  return {'ok', emit('call.denied', data)}
end
redis.call('HSET', call, 'approvers', approvals_new, 'updated_at', now)
if new_envelope ~= '' then redis.call('HSET', call, 'envelope', new_envelope) end
if new_digest ~= '' then redis.call('HSET', call, 'digest', new_digest) end
if final ~= '1' then
  audit('approved:partial', digest, audit_sig)
  return {'partial', emit('call.approved', data)}
end
redis.call('HSET', call, 'status', 'queued', 'decided_by', by, 'approval', approval)
unpark(pending_approvals, parked, tenant_parked, call_id)
if f[4] and message ~= '' then
  redis.call('HSET', call, 'message', message, 'admission', 'waiting')
  sched_join(f[4], f[5], call_id, false)
elseif message ~= '' then push(queue, pushes, queued, call, call_id, message, now)
else redis.call('ZADD', unsent, now, call_id) end
audit('approved', digest, audit_sig)
return {'ok', emit('call.approved', data)}
