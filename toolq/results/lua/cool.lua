-- COOL: archived calls of one run get the hot-window TTL instead of the result TTL, and so do
-- the run's own keys once every call of the run is final (a run still in flight keeps them).
-- One script per run, so a dispatch adding a call to the run (which refreshes the run's
-- TTLs) comes wholly before or after the check. A TTL is only ever shortened (shorten).
-- A run whose keys are cooled also leaves the runs indexes: its calls are all in the history
-- store, which lists it from then on (its runs table); a later dispatch into it adds it back.
--
-- KEYS
--   1 run_calls     the run's call ids (Keys.run_calls)
--   2 stream        the run's event stream (Keys.run_stream)
--   3 run_owner     the run's owner (Keys.run_owner)
--   4 run_settings  the run's settings (Keys.run_settings)
--   5 runs          runs by last dispatch (Keys.runs)
--   6 tenant_runs   the run's tenant's runs by last dispatch (Keys.tenant_runs)
--   7.. the records (Keys.call) of the archived calls, then their undo data (Keys.undo),
--       then their idempotency keys (Keys.idempotency; the undo key again for a call whose
--       key names another call): a retried dispatch finds the call in Redis until the
--       record leaves, then in the history store, whose row was written before this runs
-- ARGV
--   1 hot          (s) the hot window
--   2 call_prefix  what precedes a call id in its record's key (Keys.call_prefix)
--   3 run_id       the run
-- Returns {calls cooled, 1 if the run's keys were cooled else 0}.
local run_calls, stream, run_owner, run_settings = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local runs, tenant_runs = KEYS[5], KEYS[6]
local hot, call_prefix, run_id = ARGV[1], ARGV[2], ARGV[3]
-- The records start at KEYS[7], read in place: unpack has a limit a big batch would pass.
local archived, FIRST = KEYS, 7
local final = {succeeded = true, failed = true, denied = true, expired = true, cancelled = true}
-- EXPIRE ... LT without Redis 7: a key without a TTL or with a longer one gets ``hot``.
local function shorten(key)
  local ttl = redis.call('TTL', key)
  if ttl == -1 or ttl > tonumber(hot) then redis.call('EXPIRE', key, hot) end
end

local third = (#archived - FIRST + 1) / 3
local cooled = 0
for i = FIRST, FIRST + third - 1 do
  if final[redis.call('HGET', archived[i], 'status')] then
    shorten(archived[i])
    shorten(archived[third + i])
    shorten(archived[2 * third + i])
    cooled = cooled + 1
  end
end
for _, call_id in ipairs(redis.call('LRANGE', run_calls, 0, -1)) do
  local status = redis.call('HGET', call_prefix .. call_id, 'status')
  if status and not final[status] then return {cooled, 0} end
end
for _, key in ipairs({run_calls, stream, run_owner, run_settings}) do
  shorten(key)
end
redis.call('ZREM', runs, run_id)
redis.call('ZREM', tenant_runs, run_id)
return {cooled, 1}
