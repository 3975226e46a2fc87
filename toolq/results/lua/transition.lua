-- TRANSITION: the generic compare-and-set of a call's status with its event, used by
-- cancel, approvals bookkeeping and the sweeper. Includes lib/emit.lua, lib/sched.lua and lib/park.lua.
-- A call moved to a final state (a result given) frees a scheduled call's slots and its
-- rate entry if it never started; a call cancelled in its backlog is dropped from it by
-- the next ADMIT.
--
-- KEYS
--   1 call               the call's record (Keys.call)
--   2 stream             the run's event stream (Keys.run_stream)
--   3 pending_approvals  parked calls by deadline (Keys.pending_approvals)
--   4 unsent             calls whose message is not sent yet (Keys.unsent)
--   5 running            running calls by lease end (Keys.running)
--   6 hook_types         event types webhooks want (Keys.webhook_events)
--   7 outbox             webhook outbox stream (Keys.webhook_outbox)
--   8 archive            finished calls for the history store (Keys.history_archive)
--   9 parked             parked calls by parking time (Keys.parked)
--   10 tenant_parked      the tenant's parked calls (Keys.tenant_parked)
-- ARGV
--   1  call_id      the call's id
--   2  from_states  comma-separated, or '*' for any
--   3  to_status    the new status
--   4  etype        the event's type
--   5  data         (JSON)
--   6  maxlen       the run stream's approximate length cap
--   7  now          (s)
--   8  ttl          (s)
--   9  result       (JSON, '' keeps the stored one)
--   10 run_id       the call's run
--   11..            extra record field/value pairs
-- Returns {'ok', event_id, previous_status} | {'conflict', status} | {'missing'}.
local call, stream, pending_approvals, unsent = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local running, hook_types, outbox = KEYS[5], KEYS[6], KEYS[7]
local archive = KEYS[8]
local call_id, from_states, to_status, etype = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local data, maxlen, now, ttl = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local result, run_id = ARGV[9], ARGV[10]
local FIRST_EXTRA = 11
local parked, tenant_parked = KEYS[9], KEYS[10]

local function allowed(list, value)
  if list == '*' then return true end
  for item in string.gmatch(list, '[^,]+') do
    if item == value then return true end
  end
  return false
end

local status = redis.call('HGET', call, 'status')
if not status then return {'missing'} end
if not allowed(from_states, status) then return {'conflict', status} end
redis.call('HSET', call, 'status', to_status, 'updated_at', now)
if result ~= '' then
  redis.call('HSET', call, 'result', result, 'finished_at', now)
  redis.call('EXPIRE', call, ttl)
  local limits = sched_limits(redis.call('HGET', call, 'limits'))
  if limits then sched_release(limits, call_id, tonumber(now) * 1000) end
end
for i = FIRST_EXTRA, #ARGV, 2 do redis.call('HSET', call, ARGV[i], ARGV[i + 1]) end
unpark(pending_approvals, parked, tenant_parked, call_id)
redis.call('ZREM', running, call_id)
if to_status == 'queued' then redis.call('ZADD', unsent, now, call_id)
else redis.call('ZREM', unsent, call_id) end
local emit = emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now)
return {'ok', emit(etype, data), status}
