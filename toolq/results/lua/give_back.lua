-- GIVE_BACK: the calls of a batch message that a busy worker process has not started go
-- out again in one new message, for any free slot of the fleet to take (WorkerRuntime,
-- toolq/workers/slots.py). Includes lib/push.lua.
--
-- Only calls still queued (and not waiting for admission) are noted: their push_seq and
-- push_tag become the new message's, so the sweeper's lost-message check follows it. A
-- call the new message carries that another delivery starts first is skipped by START.
--
-- A share handed to the worker's idle slots early (unless_waiting '1') goes only onto an
-- empty queue: behind waiting messages an idle slot would take those first, and the calls
-- would wait longer than on their own slot.
--
-- KEYS
--   1 queue    the risk queue the message goes to (Publisher.batch_message names it)
--   2 pushes   the queue's push counter (Keys.queue_pushes)
--   3 queued   calls pushed, by push time (Keys.queued)
--   4.. per call, its record (Keys.call)
-- ARGV
--   1 message         the batch message of the calls given back
--   2 now             (s)
--   3 unless_waiting  '1': nothing pushed while the queue holds a message
--   4.. per call, its call_id
-- Returns how many calls were given back (0: none still queued; nothing pushed), or -1
-- when the queue holds a message and unless_waiting is '1' (nothing pushed).
local queue, pushes, queued = KEYS[1], KEYS[2], KEYS[3]
local message, now, unless_waiting = ARGV[1], ARGV[2], ARGV[3]
local all_keys, all_argv = KEYS, ARGV

if unless_waiting == '1' and redis.call('LLEN', queue) > 0 then return -1 end
local calls = {}
for i = 4, #all_keys do calls[#calls + 1] = {all_keys[i], all_argv[i]} end
return push_again(queue, pushes, queued, calls, message, now)
