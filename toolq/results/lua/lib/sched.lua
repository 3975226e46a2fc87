-- lib/sched.lua: the admission stage's bookkeeping, shared by every script that moves a
-- scheduled call (one whose record has a 'lane': fair share or limits apply to it).
--
-- A scheduled call's record holds, from its CREATE: 'lane' (Keys.lane of its risk),
-- 'backlog' (Keys.backlog of its risk and tenant), 'weight' (its tenant's), 'limits' (JSON
-- list of {kind = 'concurrency' | 'rate_limit', scope = 'tool' | 'tenant', name, key, cap,
-- ms}: the Keys.slots / Keys.starts sets that count it), and once queued: 'message' (its
-- Celery message) and 'admission' ('waiting': in its backlog, no message pushed;
-- 'admitted': its message pushed by ADMIT). These keys are named by the record, not by
-- KEYS: which ones a call needs is known only once its record is read.
--
-- A slot is held by the call id in the concurrency set, scored by when the hold lapses (ms):
-- admission + admission_hold, then the lease's end (START, RENEW); FINISH, RECOVER and a
-- final TRANSITION take it out, and a dead worker's entry lapses with its lease. A rate
-- limit's set scores each call by its start (ms); an admitted call not started yet stands
-- at admission + admission_hold, so it counts as starting now until it does.

-- The decoded limits of a record's 'limits' field (nil when it has none).
local function sched_limits(raw)
  if not raw or raw == '' then return nil end
  return cjson.decode(raw)
end

-- A call into its tenant's backlog (at the front: it was admitted once already) and the
-- backlog into its lane, at the lowest virtual time there (a newcomer is served next).
local function sched_join(lane, backlog, call_id, front)
  redis.call(front and 'LPUSH' or 'RPUSH', backlog, call_id)
  if not redis.call('ZSCORE', lane, backlog) then
    local low = redis.call('ZRANGE', lane, 0, 0, 'WITHSCORES')
    redis.call('ZADD', lane, tonumber(low[2] or '0'), backlog)
  end
end

-- A call queued again for a new attempt (RECOVER, RESOLVE): a scheduled call whose message
-- is its own alone (no 'carries': not a group's leader) back to the front of its backlog,
-- to be admitted again; any other (unscheduled, or of a group) into unsent, for the
-- sweeper to send. lane, backlog, message and carries are the record's fields.
local function sched_requeue(call, call_id, lane, backlog, message, carries, unsent, now)
  if lane and message and not carries then
    redis.call('HSET', call, 'admission', 'waiting')
    sched_join(lane, backlog, call_id, true)
  else
    redis.call('ZADD', unsent, now, call_id)
  end
end

-- A scheduled group ({record, call_id} of its new calls, in order) into its backlog: its
-- message and the ids it carries on its first call's record (the leader), the leader in
-- the backlog (CREATE_GROUP).
local function sched_group(lane, backlog, carried, message)
  local ids = {}
  for _, c in ipairs(carried) do ids[#ids + 1] = c[2] end
  redis.call('HSET', carried[1][1], 'message', message, 'carries', cjson.encode(ids))
  sched_join(lane, backlog, carried[1][2], false)
end

-- START: the slots held until the lease's end, the start counted at its time.
local function sched_started(limits, call_id, now_ms, lease_ms)
  for _, l in ipairs(limits) do
    if l.kind == 'concurrency' then
      redis.call('ZADD', l.key, now_ms + lease_ms, call_id)
    else
      redis.call('ZADD', l.key, now_ms, call_id)
    end
  end
end

-- RENEW: the slots held until the renewed lease's end.
local function sched_renew(limits, call_id, until_ms)
  for _, l in ipairs(limits) do
    if l.kind == 'concurrency' then redis.call('ZADD', l.key, 'XX', until_ms, call_id) end
  end
end

-- RENEW taking back a lapsed lease: whether the call still holds each of its slots.
local function sched_held(limits, call_id)
  for _, l in ipairs(limits) do
    if l.kind == 'concurrency' and not redis.call('ZSCORE', l.key, call_id) then
      return false
    end
  end
  return true
end

-- FINISH, RECOVER, a final TRANSITION: the slots freed; a start never made uncounted.
local function sched_release(limits, call_id, now_ms)
  for _, l in ipairs(limits) do
    if l.kind == 'concurrency' then
      redis.call('ZREM', l.key, call_id)
    else
      local score = redis.call('ZSCORE', l.key, call_id)
      if score and tonumber(score) > now_ms then redis.call('ZREM', l.key, call_id) end
    end
  end
end
