-- ADMIT: move calls of one risk from their tenants' backlogs to the risk's Celery queue,
-- fairly and within limits. Includes lib/emit.lua, lib/push.lua and lib/sched.lua.
--
-- Runs after a dispatch or approval that backlogged calls, after a scheduled call
-- finishes (a slot freed), and on every sweep (rate windows ending, holds lapsed).
-- While the queue holds fewer than depth messages, the backlog with the lowest virtual
-- time in the lane gives its first admissible call (within the first `window` ones): its
-- message is pushed as CREATE pushes one (lib/push.lua), it takes its slots and rate
-- entries, and its backlog's virtual time grows by 1/weight (start-time fair queueing:
-- over time each tenant with calls waiting gets admissions in proportion to its weight).
-- A call over a limit stays in its backlog and gets one call.throttled event per episode
-- (the record's 'throttled' mark names the limit; admission clears it). A backlog with no
-- admissible call is passed over until the next ADMIT; an empty one leaves the lane.
-- Calls in a backlog no longer waiting (cancelled) are dropped from it here. A backlog
-- entry may be a scheduled group's leader (its record 'carries' the group's ids): its
-- message is pushed for the members still waiting, each noted as pushed, and counts as
-- that many calls of its tenant (groups have no limits: Admission.plan).
--
-- KEYS
--   1 lane        the risk's backlogs by virtual time (Keys.lane)
--   2 queue       the risk's Celery queue (Keys.queue_for)
--   3 pushes      the queue's push counter (Keys.queue_pushes)
--   4 queued      calls pushed, by push time (Keys.queued)
--   5 hook_types  event types webhooks want (Keys.webhook_events)
--   6 outbox      webhook outbox stream (Keys.webhook_outbox)
--   7 archive     finished calls for the history store (Keys.history_archive)
-- Keys named by the lane and the records (see lib/sched.lua): backlogs, call records
-- (call_prefix .. id), slots and starts sets, run streams (stream_prefix .. run .. suffix).
-- ARGV
--   1 now            (s)
--   2 now_ms         (ms)
--   3 depth          how many messages the queue may hold
--   4 hold_ms        how long an admitted call not started keeps its slots (ms)
--   5 window         how many calls from a backlog's head are looked at
--   6 maxlen         the run stream's approximate length cap
--   7 call_prefix    of the call records' keys (Keys.call_prefix)
--   8 stream_prefix  of the run streams' keys (Keys.run_stream_parts)
--   9 stream_suffix  their suffix
-- Returns {admitted (calls), throttled (calls found over a limit), due_ms (when the first
--   rate limit found full frees a start: its oldest start leaves the window; 0: none)}.
-- The caller runs ADMIT again at due_ms (WorkerRuntime, Maintenance), so a flooded rate
-- limit starts its next call as soon as the window allows, whatever the sweep's phase.
local lane, queue, pushes, queued, hook_types, outbox =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local archive = KEYS[7]
local now, now_ms, depth, hold_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local window, maxlen = tonumber(ARGV[5]), ARGV[6]
local call_prefix, stream_prefix, stream_suffix = ARGV[7], ARGV[8], ARGV[9]

local room = depth - redis.call('LLEN', queue)
if room <= 0 then return {0, 0, 0} end
local raw = redis.call('ZRANGE', lane, 0, -1, 'WITHSCORES')
local backlogs = {}
for i = 1, #raw, 2 do
  backlogs[#backlogs + 1] = {key = raw[i], score = tonumber(raw[i + 1]), open = true}
end

-- When a limit frees (s), or nil while it has room.
local function over(l)
  if l.kind == 'concurrency' then
    redis.call('ZREMRANGEBYSCORE', l.key, '-inf', '(' .. now_ms)
    if redis.call('ZCARD', l.key) < l.cap then return nil end
    return tonumber(redis.call('ZRANGE', l.key, 0, 0, 'WITHSCORES')[2]) / 1000
  end
  redis.call('ZREMRANGEBYSCORE', l.key, '-inf', '(' .. (now_ms - l.ms))
  if redis.call('ZCARD', l.key) < l.cap then return nil end
  local first = math.min(tonumber(redis.call('ZRANGE', l.key, 0, 0, 'WITHSCORES')[2]), now_ms)
  return (first + l.ms) / 1000
end

local throttled, due_ms = 0, 0
local function throttle(call, call_id, run_id, mark, l, until_s)
  throttled = throttled + 1
  if l.kind == 'rate_limit' then
    local at = math.floor(until_s * 1000 + 0.5)
    if due_ms == 0 or at < due_ms then due_ms = at end
  end
  local episode = l.scope .. ':' .. l.name .. ':' .. l.kind
  if mark == episode then return end
  redis.call('HSET', call, 'throttled', episode)
  local emit = emitter(stream_prefix .. run_id .. stream_suffix, maxlen, hook_types, outbox,
                       archive, call_id, run_id, now)
  emit('call.throttled', cjson.encode({status = 'queued', limit = l.kind, scope = l.scope,
                                       name = l.name, ['until'] = until_s}))
end

-- A group's message pushed for its members still waiting; how many, 0 if none was.
local function admit_group(message, ids)
  local live = {}
  for _, id in ipairs(cjson.decode(ids)) do
    local member = call_prefix .. id
    local g = redis.call('HMGET', member, 'status', 'admission')
    if g[1] == 'queued' and g[2] == 'waiting' then live[#live + 1] = {member, id} end
  end
  if #live == 0 then return 0 end
  push_carried(queue, pushes, queued, live, message, now, 'admission', 'admitted')
  return #live
end

-- The first admissible call (or group) of a backlog admitted: its weight and how many calls
-- it was, or nil if none was.
local function admit_from(backlog)
  for _, call_id in ipairs(redis.call('LRANGE', backlog, 0, window - 1)) do
    local call = call_prefix .. call_id
    local f = redis.call('HMGET', call, 'status', 'admission', 'message', 'limits', 'weight',
                         'run_id', 'throttled', 'carries')
    if f[8] then
      redis.call('LREM', backlog, 1, call_id)
      local n = admit_group(f[3], f[8])
      if n > 0 then return tonumber(f[5]) or 1, n end
    elseif f[1] ~= 'queued' or f[2] ~= 'waiting' then
      redis.call('LREM', backlog, 1, call_id)
    else
      local limits = sched_limits(f[4]) or {}
      local blocked, until_s
      for _, l in ipairs(limits) do
        until_s = over(l)
        if until_s then blocked = l; break end
      end
      if blocked then
        throttle(call, call_id, f[6], f[7], blocked, until_s)
      else
        redis.call('LREM', backlog, 1, call_id)
        push(queue, pushes, queued, call, call_id, f[3], now)
        for _, l in ipairs(limits) do redis.call('ZADD', l.key, now_ms + hold_ms, call_id) end
        redis.call('HSET', call, 'admission', 'admitted')
        if f[7] then redis.call('HDEL', call, 'throttled') end
        return tonumber(f[5]) or 1, 1
      end
    end
  end
  return nil
end

local admitted = 0
while room > 0 do
  local best = nil
  for _, b in ipairs(backlogs) do
    if b.open and (best == nil or b.score < best.score) then best = b end
  end
  if best == nil then break end
  local weight, n = admit_from(best.key)
  if weight then
    admitted, room = admitted + n, room - 1
    best.score = best.score + n / weight
  else
    best.open = false
  end
  if redis.call('LLEN', best.key) == 0 then
    redis.call('ZREM', lane, best.key)
    best.open = false
  elseif weight then
    redis.call('ZADD', lane, 'XX', best.score, best.key)
  end
end
return {admitted, throttled, due_ms}
