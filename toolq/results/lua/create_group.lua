-- CREATE_GROUP: several new queued calls, each exactly as CREATE makes it, and ONE message
-- carrying them all, in one script: a queued call is never without its message, even if
-- Redis stops between two scripts (AOF replays whole scripts or none).
-- The Script wrapper prepends create.lua's text as `local function create_one(KEYS, ARGV)`
-- (after lib/emit.lua and lib/push.lua), so the record part stays create.lua's alone.
--
-- Each member runs as CREATE with no message of its own: it lands in the unsent set, and
-- is taken out again below, with the group's push bookkeeping on its record (the same
-- push_seq and push_tag for every call the message carries; Sweeper.resend_lost checks
-- and re-sends them one by one). A member that is a duplicate (or refused) is not in the
-- queued index; its id in the message finds no record and its worker skips it.
--
-- KEYS
--   1 queue    the queue the message goes to (Publisher.batch_message names it)
--   2 pushes   the queue's push counter (Keys.queue_pushes)
--   3 queued   calls pushed, by push time (Keys.queued)
--   4 unsent   calls whose message is not sent yet (Keys.unsent)
--   then, per call: its record (Keys.call), then its CREATE KEYS
-- ARGV
--   1 message   2 now (s)   3 n (calls)
--   then, per call: call_id, #its CREATE KEYS, #its CREATE ARGV, its CREATE ARGV
-- Returns one CREATE reply per call, in order.
local queue, pushes, queued, unsent = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local message, now, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local all_keys, all_argv = KEYS, ARGV
local replies, carried = {}, {}
local k, a = 5, 4
for i = 1, n do
  local record, call_id = all_keys[k], all_argv[a]
  local nkeys, nargs = tonumber(all_argv[a + 1]), tonumber(all_argv[a + 2])
  local call_keys = {unpack(all_keys, k + 1, k + nkeys)}
  local call_argv = {unpack(all_argv, a + 3, a + 2 + nargs)}
  k, a = k + 1 + nkeys, a + 3 + nargs
  local reply = create_one(call_keys, call_argv)
  replies[i] = reply
  if reply[1] == 'new' then carried[#carried + 1] = {record, call_id} end
end
if #carried > 0 then push_batch(queue, pushes, queued, unsent, carried, message, now) end
return replies
