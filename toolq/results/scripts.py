"""Lua scripts: every state change of a call is one atomic compare-and-set with its event.

Each script updates the call's hash, appends the event to the run's stream and publishes a
wake-up, so a record and its event can never disagree and a reader never misses a change.
"""

from __future__ import annotations

# Shared tail: append an event and wake readers. Expects `stream`, `channel`, `maxlen`,
# `etype`, `call_id`, `data` and `now` in scope; returns the stream id.
# An event of a type some worker's webhooks want (Keys.webhook_events) is also appended to
# the webhook outbox (Keys.webhook_outbox) here, in the same script as the event itself, so
# no notification can be lost between the two; without webhooks this costs one SISMEMBER.
# Both names are built from the run stream's (`<prefix>:run:<run_id>:events`), as keys.py
# builds them, so every script that emits needs no extra KEYS.
_EMIT = """
local function emit(stream, channel, maxlen, etype, call_id, data, now)
  local id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
                        'type', etype, 'call_id', call_id, 'ts', now, 'data', data)
  redis.call('PUBLISH', channel, id)
  local at = string.find(stream, ':run:', 1, true)
  if at then
    local prefix = string.sub(stream, 1, at - 1)
    if redis.call('SISMEMBER', prefix .. ':webhooks:events', etype) == 1 then
      redis.call('XADD', prefix .. ':webhooks:outbox', '*', 'type', etype, 'call_id', call_id,
                 'run_id', string.sub(stream, at + 5, -8), 'ts', now, 'data', data,
                 'event_id', id)
    end
  end
  return id
end
local function allowed(list, value)
  if list == '*' then return true end
  for item in string.gmatch(list, '[^,]+') do
    if item == value then return true end
  end
  return false
end
"""

# Push a call's Celery message and note it for the lost-message check (Sweeper.resend_lost):
# the push's sequence number on its queue and the message's delivery tag go on the record,
# the call into the queued index. START takes it out of the index.
# An undo message is pushed the same way (``push_as``), with its own fields and index.
_PUSH = """
local function push_as(queue, pushes, index, call, call_id, message, now, seq_field, tag_field)
  redis.call('LPUSH', queue, message)
  local seq = redis.call('INCR', pushes)
  local tag = string.match(message, '"delivery_tag": *"([^"]+)"') or ''
  redis.call('HSET', call, seq_field, seq, tag_field, tag)
  redis.call('ZADD', index, now, call_id)
end
local function push(queue, pushes, queued, call, call_id, message, now)
  push_as(queue, pushes, queued, call, call_id, message, now, 'push_seq', 'push_tag')
end
local function push_undo(queue, pushes, undo_queued, call, call_id, message, now)
  push_as(queue, pushes, undo_queued, call, call_id, message, now,
          'undo_push_seq', 'undo_push_tag')
end
"""

# A queued call's Celery message is pushed onto its queue here, with the record: a call is
# queued exactly when its message is in the queue. Without a message (''), the call goes to
# the unsent set and the sweeper sends it.
# The run's first call records its owner; a call by anyone else (unless `admin` is '1') is
# refused before anything is written. Every call record carries its run's owner.
# KEYS: idempotency, call, stream, run_calls, recent, unsent, pending_approvals, queue,
#       run_owner, queued, pushes
# ARGV: call_id, status, envelope, etype, data, channel, maxlen, ttl, now, deadline,
#       run_id, name, risk, idempotent, timeout, result, message, owner, admin,
#       extra field/value pairs...
CREATE = (
    _EMIT
    + _PUSH
    + """
local owner = redis.call('GET', KEYS[9])
if owner and owner ~= ARGV[18] and ARGV[19] ~= '1' then return {'not_owner', owner} end
local existing = redis.call('GET', KEYS[1])
if existing then return {'dup', existing} end
owner = owner or ARGV[18]
redis.call('SET', KEYS[9], owner, 'EX', ARGV[8])
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[8])
redis.call('HSET', KEYS[2], 'status', ARGV[2], 'envelope', ARGV[3], 'run_id', ARGV[11],
           'name', ARGV[12], 'risk', ARGV[13], 'idempotent', ARGV[14], 'timeout', ARGV[15],
           'created_at', ARGV[9], 'updated_at', ARGV[9], 'attempt', 0, 'recoveries', 0,
           'owner', owner)
for i = 20, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
if ARGV[16] ~= '' then
  redis.call('HSET', KEYS[2], 'result', ARGV[16], 'finished_at', ARGV[9])
  redis.call('EXPIRE', KEYS[2], ARGV[8])
end
redis.call('RPUSH', KEYS[4], ARGV[1])
redis.call('EXPIRE', KEYS[4], ARGV[8])
redis.call('ZADD', KEYS[5], ARGV[9], ARGV[1])
if ARGV[2] == 'queued' then
  if ARGV[17] ~= '' then push(KEYS[8], KEYS[11], KEYS[10], KEYS[2], ARGV[1], ARGV[17], ARGV[9])
  else redis.call('ZADD', KEYS[6], ARGV[9], ARGV[1]) end
end
if ARGV[2] == 'awaiting_approval' then redis.call('ZADD', KEYS[7], ARGV[10], ARGV[1]) end
local id = emit(KEYS[3], ARGV[6], ARGV[7], ARGV[4], ARGV[1], ARGV[5], ARGV[9])
redis.call('EXPIRE', KEYS[3], ARGV[8])
return {'new', id}
"""
)

# A retry of the same start (same token, the reply was lost) gets the same answer.
# KEYS: call, stream, lease, cancel, running, queued
# ARGV: call_id, token, lease_ms, now, channel, maxlen, cancel_result, now_ms, run_id
START = (
    _EMIT
    + """
local f = redis.call('HMGET', KEYS[1], 'status', 'run_id', 'token')
local status = f[1]
if not status then return {'missing'} end
if f[2] ~= ARGV[9] then return {'skip', 'run_mismatch'} end
if status == 'running' and f[3] == ARGV[2] then
  return {'ok', redis.call('HGET', KEYS[1], 'envelope'),
          redis.call('HGET', KEYS[1], 'attempt'), ''}
end
if status == 'queued' and redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'result', ARGV[7],
             'updated_at', ARGV[4], 'finished_at', ARGV[4])
  redis.call('ZREM', KEYS[6], ARGV[1])
  emit(KEYS[2], ARGV[5], ARGV[6], 'call.cancelled', ARGV[1], '{"status":"cancelled"}', ARGV[4])
  return {'cancelled'}
end
if status ~= 'queued' then return {'skip', status} end
if not redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[3]) then return {'leased'} end
local attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HSET', KEYS[1], 'status', 'running', 'token', ARGV[2],
           'started_at', ARGV[4], 'updated_at', ARGV[4])
redis.call('ZADD', KEYS[5], tonumber(ARGV[8]) + tonumber(ARGV[3]), ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
local id = emit(KEYS[2], ARGV[5], ARGV[6], 'call.started', ARGV[1],
                '{"status":"running","attempt":' .. attempt .. '}', ARGV[4])
return {'ok', redis.call('HGET', KEYS[1], 'envelope'), attempt, id}
"""
)

# A retry of the same finish (the reply was lost) finds it done and changes nothing.
# KEYS: call, stream, lease, running, undo
# ARGV: call_id, token, status, result, etype, data, channel, maxlen, now, ttl, undo, undo_ttl
FINISH = (
    _EMIT
    + """
local f = redis.call('HMGET', KEYS[1], 'status', 'token')
if f[2] ~= ARGV[2] then return {'stale'} end
if f[1] == ARGV[3] then return {'ok', ''} end
if f[1] ~= 'running' then return {'stale'} end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'result', ARGV[4],
           'updated_at', ARGV[9], 'finished_at', ARGV[9])
redis.call('EXPIRE', KEYS[1], ARGV[10])
if redis.call('GET', KEYS[3]) == ARGV[2] then redis.call('DEL', KEYS[3]) end
redis.call('ZREM', KEYS[4], ARGV[1])
if ARGV[11] ~= '' then redis.call('SET', KEYS[5], ARGV[11], 'EX', ARGV[12]) end
return {'ok', emit(KEYS[2], ARGV[7], ARGV[8], ARGV[5], ARGV[1], ARGV[6], ARGV[9])}
"""
)

# KEYS: call, stream
# ARGV: call_id, token, etype, data, channel, maxlen, now
PROGRESS = (
    _EMIT
    + """
if redis.call('HGET', KEYS[1], 'status') ~= 'running'
   or redis.call('HGET', KEYS[1], 'token') ~= ARGV[2] then
  return {'stale'}
end
return {'ok', emit(KEYS[2], ARGV[5], ARGV[6], ARGV[3], ARGV[1], ARGV[4], ARGV[7])}
"""
)

# KEYS: lease, running
# ARGV: call_id, token, lease_ms, now_ms
RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], tonumber(ARGV[4]) + tonumber(ARGV[3]), ARGV[1])
return 1
"""

# Generic compare-and-set used by cancel, approvals, expiry and recovery.
# KEYS: call, stream, pending_approvals, unsent, running
# ARGV: call_id, from_states, to_status, etype, data, channel, maxlen, now, ttl,
#       result ('' keeps it), extra field/value pairs...
TRANSITION = (
    _EMIT
    + """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing'} end
if not allowed(ARGV[2], status) then return {'conflict', status} end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'updated_at', ARGV[8])
if ARGV[10] ~= '' then
  redis.call('HSET', KEYS[1], 'result', ARGV[10], 'finished_at', ARGV[8])
  redis.call('EXPIRE', KEYS[1], ARGV[9])
end
for i = 11, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
if ARGV[3] == 'queued' then redis.call('ZADD', KEYS[4], ARGV[8], ARGV[1])
else redis.call('ZREM', KEYS[4], ARGV[1]) end
return {'ok', emit(KEYS[2], ARGV[6], ARGV[7], ARGV[4], ARGV[1], ARGV[5], ARGV[8]), status}
"""
)

# Recovery of a call whose worker died (its lease expired while it was running).
# KEYS: call, lease, running, stream, unsent
# ARGV: call_id, now, channel, maxlen, ttl, max_recoveries, lost_result, timeout_result
RECOVER = (
    _EMIT
    + """
if redis.call('EXISTS', KEYS[2]) == 1 then return {'alive'} end
local f = redis.call('HMGET', KEYS[1], 'status', 'idempotent', 'recoveries', 'timeout',
                    'started_at')
redis.call('ZREM', KEYS[3], ARGV[1])
if f[1] ~= 'running' then return {'gone'} end
local now = tonumber(ARGV[2])
local timeout, started = tonumber(f[4]), tonumber(f[5])
local outcome, result = 'failed', ARGV[7]
if timeout and started and now - started >= timeout then
  outcome, result = 'timeout', ARGV[8]
elseif f[2] == '1' and tonumber(f[3] or '0') < tonumber(ARGV[6]) then
  redis.call('HSET', KEYS[1], 'status', 'queued', 'token', '', 'updated_at', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'recoveries', 1)
  redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1])
  emit(KEYS[4], ARGV[3], ARGV[4], 'call.retrying', ARGV[1],
       '{"status":"queued","reason":"worker lost during execution; re-running idempotent call"}',
       ARGV[2])
  return {'requeue'}
end
redis.call('HSET', KEYS[1], 'status', 'failed', 'result', result, 'token', '',
           'updated_at', ARGV[2], 'finished_at', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[5])
emit(KEYS[4], ARGV[3], ARGV[4], 'call.failed', ARGV[1], '{"status":"failed"}', ARGV[2])
return {outcome}
"""
)

# A human's decision on a parked call: one compare-and-set, so exactly one of any number of
# racing approvers wins. Past the deadline the call is expired here and then, not decided.
# The deciding process reads the record, computes the digest of the stored arguments itself,
# signs the outcome it will commit and passes the envelope and approvals it read: if the
# envelope changed since, the decision is refused ('digest'); if the approvals did, nothing
# is written and the caller reads again ('retry'). So the stored signature always matches
# what was committed. An edit replaces the envelope and digest and resets the earlier
# approvals (they approved other arguments). Refusals are
# returned for the caller to audit; the audit entries written here carry signatures made by
# the caller (entry fields come from ARGV, so the signed bytes are exactly the stored ones).
# The final approval pushes the call's Celery message with it (as CREATE does).
# KEYS: call, stream, pending_approvals, unsent, audit, queue, queued, pushes
# ARGV: call_id, decision (approve|deny), by, now, envelope_read ('' = unchecked: the stored
#       envelope must still be exactly the one whose digest was signed), check_approvals
#       ('1' = compare approvals), channel, maxlen, ttl, event_data, result, envelope
#       ('' = unchanged), audit_maxlen, expired_result, message ('' = leave it to the sweeper),
#       approvals_read, approvals_new, final ('1' | '0'), new_digest ('' = unchanged),
#       approval (signed decision), run_id, tool, audit_sig, expired_sig, digest (of the
#       decided arguments), shown (digest of the arguments as read)
DECIDE = (
    _EMIT
    + _PUSH
    + """
local call_id, decision, by, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local envelope_read, check_approvals = ARGV[5], ARGV[6]
local channel, maxlen, ttl, data, result = ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local new_envelope, audit_maxlen, expired_result, message = ARGV[12], ARGV[13], ARGV[14], ARGV[15]
local approvals_read, approvals_new, final, new_digest = ARGV[16], ARGV[17], ARGV[18], ARGV[19]
local approval, run_id, tool = ARGV[20], ARGV[21], ARGV[22]
local audit_sig, expired_sig, digest, shown = ARGV[23], ARGV[24], ARGV[25], ARGV[26]
local f = redis.call('HMGET', KEYS[1], 'status', 'deadline', 'approvers')
if not f[1] then return {'missing'} end
local function audit(outcome, audited, sig)
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', audit_maxlen, '*', 'call_id', call_id,
             'run_id', run_id, 'tool', tool, 'by', by, 'outcome', outcome, 'digest', audited,
             'ts', now, 'sig', sig)
end
if f[1] ~= 'awaiting_approval' then return {'conflict', f[1]} end
local deadline = tonumber(f[2])
if deadline and deadline > 0 and tonumber(now) > deadline then
  redis.call('HSET', KEYS[1], 'status', 'expired', 'result', expired_result, 'updated_at', now,
             'finished_at', now)
  redis.call('ZREM', KEYS[3], call_id)
  redis.call('EXPIRE', KEYS[1], ttl)
  emit(KEYS[2], channel, maxlen, 'call.expired', call_id, '{"status":"expired"}', now)
  audit('expired', shown, expired_sig)
  return {'expired'}
end
if envelope_read ~= '' and envelope_read ~= redis.call('HGET', KEYS[1], 'envelope') then
  return {'digest'}
end
if check_approvals == '1' and (f[3] or '') ~= approvals_read then return {'retry'} end
if decision == 'deny' then
  redis.call('HSET', KEYS[1], 'status', 'denied', 'result', result, 'decided_by', by,
             'approval', approval, 'updated_at', now, 'finished_at', now)
  redis.call('ZREM', KEYS[3], call_id)
  redis.call('EXPIRE', KEYS[1], ttl)
  audit('denied', digest, audit_sig)
  return {'ok', emit(KEYS[2], channel, maxlen, 'call.denied', call_id, data, now)}
end
redis.call('HSET', KEYS[1], 'approvers', approvals_new, 'updated_at', now)
if new_envelope ~= '' then redis.call('HSET', KEYS[1], 'envelope', new_envelope) end
if new_digest ~= '' then redis.call('HSET', KEYS[1], 'digest', new_digest) end
if final ~= '1' then
  audit('approved:partial', digest, audit_sig)
  return {'partial', emit(KEYS[2], channel, maxlen, 'call.approved', call_id, data, now)}
end
redis.call('HSET', KEYS[1], 'status', 'queued', 'decided_by', by, 'approval', approval)
redis.call('ZREM', KEYS[3], call_id)
if message ~= '' then push(KEYS[6], KEYS[8], KEYS[7], KEYS[1], call_id, message, now)
else redis.call('ZADD', KEYS[4], now, call_id) end
audit('approved', digest, audit_sig)
return {'ok', emit(KEYS[2], channel, maxlen, 'call.approved', call_id, data, now)}
"""
)

# Expire a parked call whose deadline passed (the sweeper's compare-and-set).
# KEYS: call, stream, pending_approvals, audit
# ARGV: call_id, now, channel, maxlen, ttl, result, audit_maxlen
EXPIRE = (
    _EMIT
    + """
local f = redis.call('HMGET', KEYS[1], 'status', 'deadline', 'run_id', 'name', 'digest')
if f[1] ~= 'awaiting_approval' then redis.call('ZREM', KEYS[3], ARGV[1]); return 'gone' end
if tonumber(f[2]) > tonumber(ARGV[2]) then return 'early' end
redis.call('HSET', KEYS[1], 'status', 'expired', 'result', ARGV[6], 'updated_at', ARGV[2],
           'finished_at', ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[5])
emit(KEYS[2], ARGV[3], ARGV[4], 'call.expired', ARGV[1], '{"status":"expired"}', ARGV[2])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[7], '*', 'call_id', ARGV[1], 'run_id', f[3],
           'tool', f[4], 'by', 'sweeper', 'outcome', 'expired', 'digest', f[5] or '', 'ts', ARGV[2],
           'system', '1')
return 'expired'
"""
)

# The sweeper's re-send of a call that is still queued: its message pushed with the same
# bookkeeping as CREATE, and the call out of the unsent set, in one step.
# KEYS: call, queue, pushes, queued, unsent, suspect
# ARGV: call_id, message, now
RESEND = (
    _PUSH
    + """
if redis.call('HGET', KEYS[1], 'status') ~= 'queued' then
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('ZREM', KEYS[5], ARGV[1])
  return 0
end
push(KEYS[2], KEYS[3], KEYS[4], KEYS[1], ARGV[1], ARGV[2], ARGV[3])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('DEL', KEYS[6])
return 1
"""
)

# An undo moves through ``undo_state`` on the call's record: requested (its message pushed,
# here, with the claim) → undoing (a worker holds the undo lease) → undone | failed. A
# failed undo may be requested again; an undone one never.
# KEYS: call, undo, queue, pushes, undo_queued
# ARGV: call_id, now, message
UNDO_CLAIM = (
    _PUSH
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 'missing' end
local state = redis.call('HGET', KEYS[1], 'undo_state')
if state == 'requested' or state == 'undoing' then return 'in_progress' end
if state == 'undone' then return 'undone' end
if redis.call('EXISTS', KEYS[2]) == 0 then return 'nothing' end
redis.call('HSET', KEYS[1], 'undo_state', 'requested', 'undo_requested_at', ARGV[2],
           'undo_token', '')
push_undo(KEYS[3], KEYS[4], KEYS[5], KEYS[1], ARGV[1], ARGV[3], ARGV[2])
return 'ok'
"""
)

# A worker's claim on a requested undo: the undo lease and requested → undoing, so a second
# delivery of the message finds it no longer requested and does nothing. A retry of the
# same claim (same token) gets the same answer.
# KEYS: call, undo_lease, undoing, undo_queued
# ARGV: call_id, token, lease_ms, now, now_ms
UNDO_START = """
local f = redis.call('HMGET', KEYS[1], 'undo_state', 'undo_token')
if f[1] == 'undoing' and f[2] == ARGV[2] then return {'ok'} end
if f[1] ~= 'requested' then
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {'skip', f[1] or ''}
end
if not redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then return {'leased'} end
redis.call('HSET', KEYS[1], 'undo_state', 'undoing', 'undo_token', ARGV[2],
           'undo_started_at', ARGV[4])
redis.call('ZADD', KEYS[3], tonumber(ARGV[5]) + tonumber(ARGV[3]), ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return {'ok'}
"""

# The end of an undo (undone | failed) with its event; the undo data goes once undone.
# KEYS: call, stream, undo_lease, undoing, undo
# ARGV: call_id, token, state, etype, data, channel, maxlen, now
UNDO_FINISH = (
    _EMIT
    + """
local f = redis.call('HMGET', KEYS[1], 'undo_state', 'undo_token')
if f[2] ~= ARGV[2] then return {'stale'} end
if f[1] == ARGV[3] then return {'ok', ''} end
if f[1] ~= 'undoing' then return {'stale'} end
redis.call('HSET', KEYS[1], 'undo_state', ARGV[3], 'undo_finished_at', ARGV[8])
if redis.call('GET', KEYS[3]) == ARGV[2] then redis.call('DEL', KEYS[3]) end
redis.call('ZREM', KEYS[4], ARGV[1])
if ARGV[3] == 'undone' then redis.call('DEL', KEYS[5]) end
return {'ok', emit(KEYS[2], ARGV[6], ARGV[7], ARGV[4], ARGV[1], ARGV[5], ARGV[8])}
"""
)

# An undo whose worker died (its undo lease expired while undoing): failed ``worker_lost``,
# or, for an idempotent tool, requested again with a fresh message (``message``).
# KEYS: call, undo_lease, undoing, stream, queue, pushes, undo_queued
# ARGV: call_id, now, channel, maxlen, max_recoveries, lost_data, message
UNDO_RECOVER = (
    _EMIT
    + _PUSH
    + """
if redis.call('EXISTS', KEYS[2]) == 1 then return 'alive' end
redis.call('ZREM', KEYS[3], ARGV[1])
local f = redis.call('HMGET', KEYS[1], 'undo_state', 'idempotent', 'undo_recoveries')
if f[1] ~= 'undoing' then return 'gone' end
if f[2] == '1' and tonumber(f[3] or '0') < tonumber(ARGV[5]) and ARGV[7] ~= '' then
  redis.call('HSET', KEYS[1], 'undo_state', 'requested', 'undo_token', '')
  redis.call('HINCRBY', KEYS[1], 'undo_recoveries', 1)
  push_undo(KEYS[5], KEYS[6], KEYS[7], KEYS[1], ARGV[1], ARGV[7], ARGV[2])
  return 'requeue'
end
redis.call('HSET', KEYS[1], 'undo_state', 'failed', 'undo_token', '', 'undo_finished_at', ARGV[2])
emit(KEYS[4], ARGV[3], ARGV[4], 'call.undo_failed', ARGV[1], ARGV[6], ARGV[2])
return 'failed'
"""
)

# The sweeper's re-send of an undo still requested (its message lost or stranded).
# KEYS: call, queue, pushes, undo_queued, suspect
# ARGV: call_id, message, now
UNDO_RESEND = (
    _PUSH
    + """
if redis.call('HGET', KEYS[1], 'undo_state') ~= 'requested' then
  redis.call('ZREM', KEYS[4], ARGV[1])
  return 0
end
push_undo(KEYS[2], KEYS[3], KEYS[4], KEYS[1], ARGV[1], ARGV[2], ARGV[3])
redis.call('DEL', KEYS[5])
return 1
"""
)
