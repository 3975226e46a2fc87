-- RENEW: extend a lease still held by this token (call or undo lease), and a scheduled
-- call's concurrency slots with it. Includes lib/sched.lua.
--
-- KEYS
--   1 lease    the lease (Keys.lease, or Keys.undo_lease for an undo)
--   2 running  its index by lease end (Keys.running, or Keys.undoing)
--   3 call     the call's record (Keys.call; for an undo, the undo lease again)
-- ARGV
--   1 call_id   the call's id
--   2 token     the lease token
--   3 lease_ms  the lease's length (ms)
--   4 now_ms    (ms)
--   5 slots     '1': a call's lease, '0': an undo's
-- A call's lease that lapsed while nobody recovered the call (its record still runs under
-- this token, and it still holds its concurrency slots) is taken back: a worker starved of
-- CPU past its lease is not a lost one. An undo's lease has no record to ask.
-- Returns 1 (renewed) | 0 (the lease is no longer this token's).
local lease, running, call = KEYS[1], KEYS[2], KEYS[3]
local call_id, token, lease_ms, now_ms, slots = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local held = redis.call('GET', lease)
local limits = nil
if slots == '1' then limits = sched_limits(redis.call('HGET', call, 'limits')) end
if held == token then
  redis.call('PEXPIRE', lease, lease_ms)
else
  if held or slots ~= '1' then return 0 end
  local f = redis.call('HMGET', call, 'status', 'token')
  if f[1] ~= 'running' or f[2] ~= token then return 0 end
  if limits and not sched_held(limits, call_id) then return 0 end
  redis.call('SET', lease, token, 'PX', lease_ms)
end
local until_ms = tonumber(now_ms) + tonumber(lease_ms)
redis.call('ZADD', running, until_ms, call_id)
if limits then sched_renew(limits, call_id, until_ms) end
return 1
