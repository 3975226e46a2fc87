-- EXPIRE: the sweeper's expiry of a parked call whose deadline passed, with its event and
-- an audit entry (by 'sweeper', marked system: unsigned). Includes lib/emit.lua, lib/park.lua
-- and lib/audit.lua.
--
-- KEYS
--   1 call               the call's record (Keys.call)
--   2 stream             the run's event stream (Keys.run_stream)
--   3 pending_approvals  parked calls by deadline (Keys.pending_approvals)
--   4 audit_stream       the approval audit stream (Keys.audit_stream)
--   5 hook_types         event types webhooks want (Keys.webhook_events)
--   6 outbox             webhook outbox stream (Keys.webhook_outbox)
--   7 archive            finished calls for the history store (Keys.history_archive)
--   8 parked             parked calls by parking time (Keys.parked)
--   9 tenant_parked      the tenant's parked calls (Keys.tenant_parked)
--   10 audit_chain       the audit chain's state (Keys.audit_chain)
-- ARGV
--   1 call_id       the call's id
--   2 now           (s)
--   3 maxlen        the run stream's approximate length cap
--   4 ttl           (s)
--   5 result        (JSON)
--   6 audit_maxlen  the audit stream's approximate length cap
--   7 run_id        the call's run
-- Returns 'expired' | 'early' (deadline not passed) | 'gone' (no longer parked).
local call, stream, pending_approvals, audit_stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local hook_types, outbox = KEYS[5], KEYS[6]
local archive = KEYS[7]
local call_id, now, maxlen, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local result, audit_maxlen, run_id = ARGV[5], ARGV[6], ARGV[7]
local parked, tenant_parked, audit_chain = KEYS[8], KEYS[9], KEYS[10]

local f = redis.call('HMGET', call, 'status', 'deadline', 'run_id', 'name', 'digest')
if f[1] ~= 'awaiting_approval' then
  unpark(pending_approvals, parked, tenant_parked, call_id)
  return 'gone'
end
if tonumber(f[2]) > tonumber(now) then return 'early' end
redis.call('HSET', call, 'status', 'expired', 'result', result, 'updated_at', now,
           'finished_at', now)
unpark(pending_approvals, parked, tenant_parked, call_id)
redis.call('EXPIRE', call, ttl)
local emit = emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now)
emit('call.expired', '{"status":"expired"}')
audit_append(audit_stream, audit_chain, audit_maxlen, {'call_id', call_id, 'run_id', f[3],
             'tool', f[4], 'by', 'sweeper', 'outcome', 'expired', 'digest', f[5] or '',
             'ts', now, 'system', '1'})
return 'expired'
