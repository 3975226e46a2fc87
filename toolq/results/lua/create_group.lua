-- CREATE_GROUP: a run of consecutive new calls of one dispatch, each exactly as CREATE
-- makes it, in dispatch order, and ONE message per group of them (queued calls of one risk
-- and time limit), in one script: a queued call is never without its message, even if
-- Redis stops between two scripts (AOF replays whole scripts or none).
-- The Script wrapper prepends create.lua's text as `local function create_one(KEYS, ARGV)`
-- (after lib/emit.lua and lib/push.lua), so the record part stays create.lua's alone.
--
-- A call in no group runs as CREATE with its own arguments (its own message, if any). A
-- group's member runs as CREATE with message 'group' (its group's message carries it: it
-- goes neither to the queue nor to the unsent set), and push_carried notes the group's push
-- on its record (the same push_seq and push_tag for every call the message carries;
-- Sweeper.resend_lost checks and re-sends them one by one). A member that is a duplicate
-- (or refused, or created denied over its tenant's budget) is not noted; its id in the
-- message finds no record (or a final one) and its worker skips it. A member's CREATE that
-- raises (a key of the wrong type) ends the script with its error, after the calls created
-- before it got their groups' messages: Redis keeps a script's writes up to its error.
--
-- A scheduled group (its calls go through admission, lib/sched.lua) is not pushed: its
-- message goes on its first new call's record (the leader) with the ids it carries
-- ('carries', JSON), and the leader into the tenant's backlog; ADMIT pushes it for the
-- members still waiting.
--
-- KEYS
--   1  queued  calls pushed, by push time (Keys.queued)
--   2..        per message: its queue, the queue's push counter (Keys.queue_pushes), the
--              backlog and lane of a scheduled group (Keys.backlog, Keys.lane; else
--              Keys.unsent); then, per call: its record (Keys.call), then its CREATE KEYS
-- ARGV
--   1  now     (s)
--   2  m       the number of messages
--   3  n       the number of calls
--   4..        the m messages (Publisher.batch_message); then, per message, '1' if its
--              group is scheduled, else '0'; then, per call: call_id, its message's
--              number (1..m; 0: none), #its CREATE KEYS, #its CREATE ARGV, its CREATE ARGV
-- Returns one CREATE reply per call, in order.
local queued = KEYS[1]
local now, m, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local all_keys, all_argv = KEYS, ARGV
local replies, carried = {}, {}
for g = 1, m do carried[g] = {} end
local function send_carried()
  for g = 1, m do
    local base = 4 * g - 2
    if #carried[g] > 0 and all_argv[3 + m + g] == '1' then
      sched_group(all_keys[base + 3], all_keys[base + 2], carried[g], all_argv[3 + g])
    elseif #carried[g] > 0 then
      push_carried(all_keys[base], all_keys[base + 1], queued, carried[g], all_argv[3 + g], now)
    end
  end
end
local k, a = 2 + 4 * m, 4 + 2 * m
for i = 1, n do
  local record, call_id, group = all_keys[k], all_argv[a], tonumber(all_argv[a + 1])
  local nkeys, nargs = tonumber(all_argv[a + 2]), tonumber(all_argv[a + 3])
  local call_keys = {unpack(all_keys, k + 1, k + nkeys)}
  local call_argv = {unpack(all_argv, a + 4, a + 3 + nargs)}
  k, a = k + 1 + nkeys, a + 4 + nargs
  local ok, reply = pcall(create_one, call_keys, call_argv)
  if not ok then
    -- Redis keeps what a script wrote before its error: the calls created so far get
    -- their messages before the error is raised, so none is left without one.
    send_carried()
    error(reply)
  end
  replies[i] = reply
  if group > 0 and reply[1] == 'new' then
    carried[group][#carried[group] + 1] = {record, call_id}
  end
end
send_carried()
return replies
