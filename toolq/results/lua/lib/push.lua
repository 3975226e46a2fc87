-- lib/push.lua: a Celery message pushed onto its queue and noted for the sweeper's
-- lost-message check (Sweeper.resend_lost).
--
-- push_as(queue, pushes, index, call, call_id, message, now, seq_field, tag_field):
--   queue   KEYS: the risk queue the message goes to (Publisher.message names it)
--   pushes  KEYS: the queue's push counter (Keys.queue_pushes)
--   index   KEYS: the queued (or undo_queued) index, scored by push time
--   call    KEYS: the call's record (Keys.call)
-- The push's sequence number on its queue and the message's delivery tag go on the record
-- (seq_field, tag_field), the call into the index. START (UNDO_START) takes it out again.
local function push_as(queue, pushes, index, call, call_id, message, now, seq_field, tag_field)
  redis.call('LPUSH', queue, message)
  local seq = redis.call('INCR', pushes)
  local tag = string.match(message, '"delivery_tag": *"([^"]+)"') or ''
  redis.call('HSET', call, seq_field, seq, tag_field, tag)
  redis.call('ZADD', index, now, call_id)
end
-- A call's message: push_seq / push_tag.
local function push(queue, pushes, queued, call, call_id, message, now)
  push_as(queue, pushes, queued, call, call_id, message, now, 'push_seq', 'push_tag')
end
-- An undo's message: undo_push_seq / undo_push_tag.
local function push_undo(queue, pushes, undo_queued, call, call_id, message, now)
  push_as(queue, pushes, undo_queued, call, call_id, message, now,
          'undo_push_seq', 'undo_push_tag')
end
-- One message for several calls, {record, call_id} in carried: pushed once, and each call
-- noted as push() notes one: the same push_seq and push_tag on every record (with the
-- field/value pairs of ..., if any), the call into queued.
local function push_carried(queue, pushes, queued, carried, message, now, ...)
  redis.call('LPUSH', queue, message)
  local seq = redis.call('INCR', pushes)
  local tag = string.match(message, '"delivery_tag": *"([^"]+)"') or ''
  for _, c in ipairs(carried) do
    redis.call('HSET', c[1], 'push_seq', seq, 'push_tag', tag, ...)
    redis.call('ZADD', queued, now, c[2])
  end
end
-- Calls a busy worker gives back (GIVE_BACK), {record, call_id} in calls: one new message
-- for those still queued (and not waiting for admission), noted on each as push_carried
-- notes them; how many (0: none, nothing pushed).
local function push_again(queue, pushes, queued, calls, message, now)
  local live = {}
  for _, c in ipairs(calls) do
    local f = redis.call('HMGET', c[1], 'status', 'admission')
    if f[1] == 'queued' and f[2] ~= 'waiting' then live[#live + 1] = c end
  end
  if #live == 0 then return 0 end
  push_carried(queue, pushes, queued, live, message, now)
  return #live
end
