-- WEBHOOK_CLAIM: one webhook delivery taken for one attempt, if it is due: its due time
-- moves past the attempt's end, so a worker killed mid-attempt leaves it due again soon.
--
-- KEYS
--   1 due       pending deliveries by next attempt (Keys.webhook_due)
--   2 delivery  the delivery's record (Keys.webhook_delivery)
-- ARGV
--   1 delivery_id    the delivery's id
--   2 now            (s)
--   3 claimed_until  (s)
-- Returns the delivery's fields (HGETALL, attempts counted) | nil (not due, or gone).
local due, delivery = KEYS[1], KEYS[2]
local delivery_id, now, claimed_until = ARGV[1], ARGV[2], ARGV[3]

local score = redis.call('ZSCORE', due, delivery_id)
if not score or tonumber(score) > tonumber(now) then return false end
if redis.call('EXISTS', delivery) == 0 then
  redis.call('ZREM', due, delivery_id)
  return false
end
redis.call('ZADD', due, claimed_until, delivery_id)
redis.call('HINCRBY', delivery, 'attempts', 1)
return redis.call('HGETALL', delivery)
