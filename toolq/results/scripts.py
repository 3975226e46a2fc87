"""Lua scripts: every state change of a call is one atomic compare-and-set with its event.

Each script updates the call's hash, appends the event to the run's stream and publishes a
wake-up, so a record and its event can never disagree and a reader never misses a change.
"""

from __future__ import annotations

# Shared tail: append an event and wake readers. Expects `stream`, `channel`, `maxlen`,
# `etype`, `call_id`, `data` and `now` in scope; returns the stream id.
_EMIT = """
local function emit(stream, channel, maxlen, etype, call_id, data, now)
  local id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
                        'type', etype, 'call_id', call_id, 'ts', now, 'data', data)
  redis.call('PUBLISH', channel, id)
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

# KEYS: idempotency, call, stream, run_calls, recent, unsent, pending_approvals
# ARGV: call_id, status, envelope, etype, data, channel, maxlen, ttl, now, deadline,
#       run_id, name, risk, idempotent, timeout, result
CREATE = (
    _EMIT
    + """
local existing = redis.call('GET', KEYS[1])
if existing then return {'dup', existing} end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[8])
redis.call('HSET', KEYS[2], 'status', ARGV[2], 'envelope', ARGV[3], 'run_id', ARGV[11],
           'name', ARGV[12], 'risk', ARGV[13], 'idempotent', ARGV[14], 'timeout', ARGV[15],
           'created_at', ARGV[9], 'updated_at', ARGV[9], 'attempt', 0, 'recoveries', 0)
if ARGV[16] ~= '' then
  redis.call('HSET', KEYS[2], 'result', ARGV[16], 'finished_at', ARGV[9])
  redis.call('EXPIRE', KEYS[2], ARGV[8])
end
redis.call('RPUSH', KEYS[4], ARGV[1])
redis.call('EXPIRE', KEYS[4], ARGV[8])
redis.call('ZADD', KEYS[5], ARGV[9], ARGV[1])
if ARGV[2] == 'queued' then redis.call('ZADD', KEYS[6], ARGV[9], ARGV[1]) end
if ARGV[2] == 'awaiting_approval' then redis.call('ZADD', KEYS[7], ARGV[10], ARGV[1]) end
local id = emit(KEYS[3], ARGV[6], ARGV[7], ARGV[4], ARGV[1], ARGV[5], ARGV[9])
redis.call('EXPIRE', KEYS[3], ARGV[8])
return {'new', id}
"""
)

# KEYS: call, stream, lease, cancel, running
# ARGV: call_id, token, lease_ms, now, channel, maxlen, cancel_result, now_ms
START = (
    _EMIT
    + """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing'} end
if status == 'queued' and redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'result', ARGV[7],
             'updated_at', ARGV[4], 'finished_at', ARGV[4])
  emit(KEYS[2], ARGV[5], ARGV[6], 'call.cancelled', ARGV[1], '{"status":"cancelled"}', ARGV[4])
  return {'cancelled'}
end
if status ~= 'queued' then return {'skip', status} end
if not redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[3]) then return {'leased'} end
local attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HSET', KEYS[1], 'status', 'running', 'token', ARGV[2],
           'started_at', ARGV[4], 'updated_at', ARGV[4])
redis.call('ZADD', KEYS[5], tonumber(ARGV[8]) + tonumber(ARGV[3]), ARGV[1])
local id = emit(KEYS[2], ARGV[5], ARGV[6], 'call.started', ARGV[1],
                '{"status":"running","attempt":' .. attempt .. '}', ARGV[4])
return {'ok', redis.call('HGET', KEYS[1], 'envelope'), attempt, id}
"""
)

# KEYS: call, stream, lease, running, undo
# ARGV: call_id, token, status, result, etype, data, channel, maxlen, now, ttl, undo, undo_ttl
FINISH = (
    _EMIT
    + """
if redis.call('HGET', KEYS[1], 'status') ~= 'running'
   or redis.call('HGET', KEYS[1], 'token') ~= ARGV[2] then
  return {'stale'}
end
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
