-- START: a worker takes the execution lease of a queued call: queued -> running + event.
-- Includes lib/emit.lua and lib/sched.lua. Runs once per call on the worker's hot path (DirectScripts).
--
-- A retry of the same start (same token: the reply was lost) gets the same answer. A call
-- whose durable cancel flag is set is cancelled here instead of started. The record is
-- read with one HMGET (the envelope and attempt with it, and the tool, risk and inbox its
-- event needs) and written with one HSET. A scheduled call still waiting in its backlog is
-- not started (a stale copy of an earlier message); a scheduled call's slots are held until
-- its lease's end and its start is counted by its rate limits (lib/sched.lua).
--
-- KEYS
--   1 call        the call's record (Keys.call)
--   2 stream      the run's event stream (Keys.run_stream)
--   3 lease       the execution lease (Keys.lease)
--   4 cancel      the durable cancel flag (Keys.cancel)
--   5 running     running calls by lease end (Keys.running)
--   6 queued      calls pushed, by push time (Keys.queued)
--   7 hook_types  event types webhooks want (Keys.webhook_events)
--   8 outbox      webhook outbox stream (Keys.webhook_outbox)
--   9 archive     finished calls for the history store (Keys.history_archive)
-- ARGV
--   1 call_id        the call's id
--   2 token          the worker's lease token
--   3 lease_ms       the lease's length (ms)
--   4 now            (s)
--   5 maxlen         the run stream's approximate length cap
--   6 cancel_result  JSON result of a call cancelled here
--   7 now_ms         (ms)
--   8 run_id         from the message; must match the record's
-- Returns {'ok', envelope, attempt, event_id ('' for a repeat)} | {'cancelled'} |
--   {'leased'} | {'missing'} | {'skip', status} | {'skip', 'run_mismatch'} |
--   {'skip', 'waiting'}.
local call, stream, lease, cancel = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local running, queued, hook_types, outbox = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local archive = KEYS[9]
local call_id, token, lease_ms, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local maxlen, cancel_result, now_ms, run_id = ARGV[5], ARGV[6], ARGV[7], ARGV[8]

local f = redis.call('HMGET', call, 'status', 'run_id', 'token', 'attempt', 'envelope',
                    'admission', 'limits', 'name', 'risk', 'notify')
local status, envelope = f[1], f[5]
if not status then return {'missing'} end
if f[2] ~= run_id then return {'skip', 'run_mismatch'} end
if status == 'running' and f[3] == token then return {'ok', envelope, f[4], ''} end
local emit = emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now,
                     {f[8], f[9], f[10]})
-- Only a running call gets a cancel flag (Client.cancel), so a call never started before
-- (attempt 0) has none: its first start skips the lookup.
if status == 'queued' and f[4] ~= '0' and redis.call('EXISTS', cancel) == 1 then
  redis.call('HSET', call, 'status', 'cancelled', 'result', cancel_result,
             'updated_at', now, 'finished_at', now)
  redis.call('ZREM', queued, call_id)
  emit('call.cancelled', '{"status":"cancelled"}')
  return {'cancelled'}
end
if status ~= 'queued' then return {'skip', status} end
if f[6] == 'waiting' then return {'skip', 'waiting'} end
if not redis.call('SET', lease, token, 'NX', 'PX', lease_ms) then return {'leased'} end
local attempt = (tonumber(f[4]) or 0) + 1
redis.call('HSET', call, 'status', 'running', 'token', token, 'attempt', attempt,
           'started_at', now, 'updated_at', now)
redis.call('ZADD', running, tonumber(now_ms) + tonumber(lease_ms), call_id)
redis.call('ZREM', queued, call_id)
local limits = sched_limits(f[7])
if limits then sched_started(limits, call_id, tonumber(now_ms), tonumber(lease_ms)) end
local id = emit('call.started', '{"status":"running","attempt":' .. attempt .. '}')
return {'ok', envelope, attempt, id}
