-- CREATE: a new call's record, its first event and, if it is runnable now, its message.
-- Includes lib/emit.lua, lib/push.lua and lib/sched.lua.
--
-- The idempotency key is claimed with the record, so a retried dispatch never creates a
-- second call. The claim holds the call id and the call's fingerprint (its tool and
-- arguments, Dispatcher): a claimed key with another fingerprint is a call id reused for
-- another call, refused ('call_id_conflict') with nothing written, so an id never hands
-- back a call other than the one it was dispatched for. A claim without a fingerprint
-- (written before claims carried one) is a duplicate, as it was then. A queued call's Celery message is pushed here, with the record: a call is
-- queued exactly when its message is in the queue. Without a message ('') the call goes to
-- the unsent set and the sweeper sends it. A scheduled queued call (schedule '1') gets
-- no push: its message goes on its record and the call into its tenant's backlog, for
-- ADMIT to push (lib/sched.lua); a queued call is in its backlog or has its message (a
-- scheduled group's member: its group's leader is in the backlog). The run's first call
-- records its owner; a call by anyone else (unless admin is '1') is refused before
-- anything is written.
--
-- The run's TTLs (its owner, call list and stream: result_ttl from the dispatch) are set by
-- the dispatch's last CREATE of the run (refresh '1') rather than by every call, and by a
-- run's first call when it creates the owner key. A dispatch's calls run in one pipeline,
-- so every key the dispatch wrote exists when its last CREATE runs, even a 'dup' one.
-- The same CREATE scores the run in the runs indexes with the time of that dispatch and
-- drops the runs whose keys expired (last dispatched more than ttl ago): listings of runs
-- stay bounded by the result TTL. A call refused as a conflict writes nothing there.
--
-- KEYS
--   1  idempotency        the claimed idempotency key (Keys.idempotency)
--   2  call               the call's record (Keys.call)
--   3  stream             the run's event stream (Keys.run_stream)
--   4  run_calls          the run's call ids in dispatch order (Keys.run_calls)
--   5  recent             recent-calls index (Keys.recent_calls)
--   6  unsent             calls whose message is not sent yet (Keys.unsent)
--   7  pending_approvals  parked calls by deadline (Keys.pending_approvals)
--   8  queue              the queue the message goes to (Keys.unsent when there is none)
--   9  run_owner          the run's owner (Keys.run_owner)
--   10 queued             calls pushed, by push time (Keys.queued)
--   11 pushes             the queue's push counter (Keys.queue_pushes; Keys.unsent if none)
--   12 spent              the tenant's spent counter of this budget period
--                         (Keys.tenant_spent; Keys.unsent when the call is not charged)
--   13 hook_types         event types webhooks want (Keys.webhook_events)
--   14 outbox             webhook outbox stream (Keys.webhook_outbox)
--   15 archive            finished calls for the history store (Keys.history_archive)
--   16 backlog            the tenant's backlog of the risk (Keys.backlog; Keys.unsent if none)
--   17 lane               the risk's lane (Keys.lane; Keys.unsent if none)
--   18 parked             parked calls by parking time (Keys.parked)
--   19 tenant_parked      the tenant's parked calls by parking time (Keys.tenant_parked)
--   20 runs               runs by last dispatch (Keys.runs)
--   21 tenant_runs        the tenant's runs by last dispatch (Keys.tenant_runs)
-- ARGV
--   1  call_id            the call's id
--   2  status             queued | awaiting_approval | a final status
--   3  envelope           the call's envelope (JSON)
--   4  etype              the first event's type
--   5  data               its data (JSON)
--   6  maxlen             the run stream's approximate length cap
--   7  ttl                (s)
--   8  now                (s)
--   9  deadline           (s, 0 = none)
--   10 run_id             the call's run
--   11 name               the tool's name
--   12 risk               the tool's risk
--   13 idempotent         '1' | '0'
--   14 timeout            (s, '' = none)
--   15 result             (JSON, '' = not final)
--   16 message            ('' = leave it to the sweeper; 'group' = its group's message
--                         carries it: CREATE_GROUP pushes or backlogs that message)
--   17 submitter          the dispatching principal (RunOwner.encode)
--   18 admin              '1' | '0'
--   19 refresh            '1': the dispatch's last call of this run
--   20 tenant             the call's tenant (a run's owner names it, null = 'default')
--   21 cost_text          what the call is charged ('0': nothing to charge)
--   22 limit              the tenant's budget for the period ('' = no budget)
--   23 spent_ttl          (s) how long the spent counter must live
--   24 denied_result      result JSON of a call over budget; LEFT_MARK stands for what is left
--   25 denied_data        its call.denied event data, with the same mark
--   26 denied_envelope    the envelope stored instead when over budget ('' = the same)
--   27 schedule           '1': a queued call goes to its backlog, not to the queue
--   28 fingerprint        the call's tool and arguments, claimed with the key ('' = none)
--   29 notify             the inbox its final event is copied to (Keys.wait_inbox, '' = none)
--   30..                  extra record field/value pairs (a scheduled call's lane, backlog,
--                         weight, limits)
--
-- Budgets: a queued or parked call with a cost > 0 and a budget is charged here (the
-- counter INCRBYFLOAT, the record's 'charged' field), after the idempotency key is claimed,
-- so a retried dispatch is never charged twice. A call whose cost would take the counter
-- past the limit (by more than BUDGET_SLACK of it: float rounding) is created 'denied'
-- (call.denied, error_type budget_exceeded) and charges nothing; its message is not pushed,
-- it is not parked and it joins no backlog.
-- Returns {'new', event_id} | {'over_budget', event_id} (created denied) |
-- {'dup', existing_call_id} | {'call_id_conflict', existing_call_id} | {'not_owner', owner}.
local idempotency, call, stream, run_calls = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local recent, unsent, pending_approvals, queue = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local run_owner, queued, pushes = KEYS[9], KEYS[10], KEYS[11]
local spent, hook_types, outbox = KEYS[12], KEYS[13], KEYS[14]
local archive = KEYS[15]
local backlog, lane = KEYS[16], KEYS[17]
local parked, tenant_parked, runs, tenant_runs = KEYS[18], KEYS[19], KEYS[20], KEYS[21]
local call_id, status, envelope, etype, data = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local maxlen, ttl, now, deadline = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local run_id, name, risk, idempotent, timeout = ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14]
local result, message, submitter, admin = ARGV[15], ARGV[16], ARGV[17], ARGV[18]
local refresh = ARGV[19] == '1'
local tenant, cost_text, limit, spent_ttl = ARGV[20], ARGV[21], ARGV[22], ARGV[23]
local denied_result, denied_data, denied_envelope = ARGV[24], ARGV[25], ARGV[26]
local schedule = ARGV[27] == '1'
local fingerprint = ARGV[28]
local notify = ARGV[29]
local grouped = message == 'group'
if grouped then message = '' end
local FIRST_EXTRA = 30
local LEFT_MARK = '__TOOLQ_BUDGET_LEFT__'
local BUDGET_SLACK = 1e-9
local cost = tonumber(cost_text)

local DEFAULT_TENANT = 'default'
local function tenant_of(owner_json)
  local ok, named = pcall(function() return cjson.decode(owner_json)['tenant'] end)
  if ok and named and named ~= cjson.null then return named end
  return DEFAULT_TENANT
end

local function refresh_run(owner_new, listed)
  if not refresh then return end
  if not owner_new then redis.call('EXPIRE', run_owner, ttl) end
  redis.call('EXPIRE', run_calls, ttl)
  redis.call('EXPIRE', stream, ttl)
  if not listed then return end
  local gone = string.format('(%.6f', tonumber(now) - tonumber(ttl))
  redis.call('ZADD', runs, now, run_id)
  redis.call('ZREMRANGEBYSCORE', runs, '-inf', gone)
  redis.call('ZADD', tenant_runs, now, run_id)
  redis.call('ZREMRANGEBYSCORE', tenant_runs, '-inf', gone)
end

-- (SET NX GET would read and claim the owner in one command, but needs Redis 7.)
local owner = redis.call('GET', run_owner)
-- An admin may add calls to another principal's run, never to another tenant's.
if owner and owner ~= submitter and (admin ~= '1' or tenant_of(owner) ~= tenant) then
  return {'not_owner', owner}
end
local claim = call_id
if fingerprint ~= '' then claim = string.format('%s %s', call_id, fingerprint) end
if not redis.call('SET', idempotency, claim, 'NX', 'EX', ttl) then
  local existing, claimed = string.match(redis.call('GET', idempotency), '^(%S+) ?(.*)$')
  local conflict = fingerprint ~= '' and claimed ~= '' and claimed ~= fingerprint
  refresh_run(false, not conflict)
  if conflict then return {'call_id_conflict', existing} end
  return {'dup', existing}
end
local owner_new = not owner
if owner_new then
  owner = submitter
  redis.call('SET', run_owner, owner, 'EX', ttl)
end
local charged, over_budget = nil, false
if cost > 0 and limit ~= '' and (status == 'queued' or status == 'awaiting_approval') then
  local used, most = tonumber(redis.call('GET', spent) or '0'), tonumber(limit)
  -- Sums of binary floats drift (0.1 + 0.1 + 0.1 > 0.3): a billionth of the limit is
  -- forgiven, so ten calls of 0.1 fit a budget of 1.
  if used + cost > most + BUDGET_SLACK * math.max(1, most) then
    local left = tostring(math.max(0, tonumber(limit) - used))
    status, etype, over_budget = 'denied', 'call.denied', true
    result = string.gsub(denied_result, LEFT_MARK, left)
    data = string.gsub(denied_data, LEFT_MARK, left)
    if denied_envelope ~= '' then envelope = denied_envelope end
  else
    redis.call('INCRBYFLOAT', spent, cost)
    redis.call('EXPIRE', spent, spent_ttl)
    charged = cost_text
  end
end
local record = {'status', status, 'envelope', envelope, 'run_id', run_id, 'name', name,
                'risk', risk, 'idempotent', idempotent, 'timeout', timeout,
                'created_at', now, 'updated_at', now, 'attempt', 0, 'recoveries', 0,
                'owner', owner, 'tenant', tenant}
if charged then record[#record + 1] = 'charged'; record[#record + 1] = charged end
if notify ~= '' then record[#record + 1] = 'notify'; record[#record + 1] = notify end
for i = FIRST_EXTRA, #ARGV do record[#record + 1] = ARGV[i] end
if result ~= '' then
  record[#record + 1] = 'result'; record[#record + 1] = result
  record[#record + 1] = 'finished_at'; record[#record + 1] = now
end
redis.call('HSET', call, unpack(record))
if result ~= '' then redis.call('EXPIRE', call, ttl) end
redis.call('RPUSH', run_calls, call_id)
redis.call('ZADD', recent, now, call_id)
if status == 'queued' then
  if schedule then
    -- without a message: a member of a scheduled group (CREATE_GROUP backlogs its leader)
    redis.call('HSET', call, 'admission', 'waiting')
    if message ~= '' then
      redis.call('HSET', call, 'message', message)
      sched_join(lane, backlog, call_id, false)
    end
  elseif message ~= '' then push(queue, pushes, queued, call, call_id, message, now)
  elseif not grouped then redis.call('ZADD', unsent, now, call_id) end
end
if status == 'awaiting_approval' then
  redis.call('ZADD', pending_approvals, deadline, call_id)
  redis.call('ZADD', parked, now, call_id)
  redis.call('ZADD', tenant_parked, now, call_id)
end
local emit = emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now,
                     {name, risk, notify ~= '' and notify})
local id = emit(etype, data)
refresh_run(owner_new, true)
if over_budget then return {'over_budget', id} end
return {'new', id}
