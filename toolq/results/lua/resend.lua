-- RESEND: the sweeper's re-send of a call still queued: its message pushed with the same
-- bookkeeping as CREATE, and the call out of the unsent set, in one step.
-- Includes lib/push.lua. A scheduled call waiting in its backlog is not sent: ADMIT
-- sends it.
--
-- KEYS
--   1 call     the call's record (Keys.call)
--   2 queue    the queue the message goes to (Publisher.message names it)
--   3 pushes   the queue's push counter (Keys.queue_pushes)
--   4 queued   calls pushed, by push time (Keys.queued)
--   5 unsent   calls whose message is not sent yet (Keys.unsent)
--   6 suspect  the lost-message suspicion mark (Keys.lost_suspect)
-- ARGV
--   1 call_id  the call's id
--   2 message  the message
--   3 now      (s)
-- Returns 1 (pushed) | 0 (no longer queued: only taken out of the indexes).
local call, queue, pushes, queued, unsent, suspect =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local call_id, message, now = ARGV[1], ARGV[2], ARGV[3]

local f = redis.call('HMGET', call, 'status', 'admission')
if f[1] ~= 'queued' or f[2] == 'waiting' then
  redis.call('ZREM', queued, call_id)
  redis.call('ZREM', unsent, call_id)
  return 0
end
push(queue, pushes, queued, call, call_id, message, now)
redis.call('ZREM', unsent, call_id)
redis.call('DEL', suspect)
return 1
