-- FINISH: a running call's final state and its event; the undo data kept, if any.
-- Includes lib/emit.lua and lib/sched.lua. Runs once per call on the worker's hot path (DirectScripts).
--
-- A retry of the same finish (same token: the reply was lost) finds it done and changes
-- nothing. A runner that lost the call (another token, or no longer running) is stale.
-- A scheduled call's concurrency slots are freed (lib/sched.lua).
--
-- Except the runner whose lease lapsed while it ran on (a hung or partitioned worker) of a
-- call recover.lua then parked as 'unknown' under its token ('lost_token'): the call waits
-- for a person only because nobody knew whether the handler had its effect, and this runner
-- knows, when its handler ended on its own (returned, or raised its own error: 'settles').
-- That outcome settles the call (out of the unknown set, 'settled_late'); an end toolq
-- caused (cancelled by the lost lease, the time limit) says nothing of the effect and is
-- stale. Once a person resolved it (resolve.lua clears 'lost_token'), theirs stands.
--
-- KEYS
--   1 call        the call's record (Keys.call)
--   2 stream      the run's event stream (Keys.run_stream)
--   3 lease       the execution lease (Keys.lease)
--   4 running     running calls by lease end (Keys.running)
--   5 undo        the call's undo data (Keys.undo)
--   6 hook_types  event types webhooks want (Keys.webhook_events)
--   7 outbox      webhook outbox stream (Keys.webhook_outbox)
--   8 archive     finished calls for the history store (Keys.history_archive)
--   9 durations   execution-time counters per tool (Keys.metrics_durations)
--   10 unknown    calls of unknown outcome, by when lost (Keys.unknown)
-- ARGV
--   1  call_id    the call's id
--   2  token      the worker's lease token
--   3  status     (final)
--   4  result     (JSON)
--   5  etype      the final event's type
--   6  data       the event's data (JSON)
--   7  maxlen     the run stream's approximate length cap
--   8  now        (s)
--   9  ttl        (s)
--   10 undo_data  the call's undo data (JSON, '' = none)
--   11 undo_ttl   (s)
--   12 run_id     the call's run
--   13 bucket_field  its tool's histogram bucket field in durations ('' = not counted; the
--                    count of its calls is the sum of its buckets, +Inf included)
--   14 sum_field     its tool's sum field in durations (microseconds)
--   15 duration_us   its execution time (microseconds)
--   16 settles       '1': the handler ended on its own (may settle a call it lost)
-- Returns {'ok', event_id ('' for a repeat)} | {'stale'}.
local call, stream, lease, running, undo = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local hook_types, outbox = KEYS[6], KEYS[7]
local archive, durations, unknown = KEYS[8], KEYS[9], KEYS[10]
local call_id, token, status, result, etype = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local data, maxlen, now, ttl = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local undo_data, undo_ttl, run_id = ARGV[10], ARGV[11], ARGV[12]
local bucket_field, sum_field, duration_us = ARGV[13], ARGV[14], ARGV[15]
local settles = ARGV[16] == '1'

-- (name, risk and notify for the event: lib/emit.lua need not read the record again)
local f = redis.call('HMGET', call, 'status', 'token', 'limits', 'name', 'risk', 'notify',
                    'lost_token')
local late = settles and token ~= '' and f[7] == token
if f[2] ~= token and not late then return {'stale'} end
if f[1] == status then return {'ok', ''} end
if f[1] ~= (late and 'unknown' or 'running') then return {'stale'} end
redis.call('HSET', call, 'status', status, 'result', result,
           'updated_at', now, 'finished_at', now)
if late then
  redis.call('HSET', call, 'settled_late', '1')
  redis.call('ZREM', unknown, call_id)
end
redis.call('EXPIRE', call, ttl)
-- The record runs under this token, so the lease is this token's or expired: only START
-- takes it, and START writes the record's token in the same script.
redis.call('DEL', lease)
redis.call('ZREM', running, call_id)
local limits = sched_limits(f[3])
if limits then sched_release(limits, call_id, tonumber(now) * 1000) end
if undo_data ~= '' then redis.call('SET', undo, undo_data, 'EX', undo_ttl) end
if bucket_field ~= '' then
  redis.call('HINCRBY', durations, bucket_field, 1)
  redis.call('HINCRBY', durations, sum_field, duration_us)
end
local emit = emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now,
                     {f[4], f[5], f[6]})
return {'ok', emit(etype, data)}
