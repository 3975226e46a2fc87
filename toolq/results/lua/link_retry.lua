-- LINK_RETRY: a retry's new call and the call it retries, linked both ways (retry_call):
-- the new record's 'retry_of' names the old call, the old record's 'retried_by' the new one.
--
-- Only onto records still in Redis. The old call's hot window (cool.lua) can end while its
-- retry is dispatched: it then lives in the history store only, and writing its link would
-- make a one-field hash, with no TTL, in place of the archived call (readers would take it
-- for the record, the archiver for a call). The first retry to link wins; the others learn
-- which call won.
--
-- KEYS
--   1 old     the retried call's record (Keys.call)
--   2 new     the retry's record (Keys.call)
-- ARGV
--   1 old_id  the retried call's id
--   2 new_id  the retry's call id
-- Returns {'linked', the winning retry's call id} | {'gone'} (the old record left Redis).
local old, new = KEYS[1], KEYS[2]
local old_id, new_id = ARGV[1], ARGV[2]

if redis.call('HEXISTS', old, 'status') == 0 then return {'gone'} end
if redis.call('HEXISTS', new, 'status') == 1 then
  redis.call('HSET', new, 'retry_of', old_id)
end
redis.call('HSETNX', old, 'retried_by', new_id)
return {'linked', redis.call('HGET', old, 'retried_by')}
