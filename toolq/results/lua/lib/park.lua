-- lib/park.lua: a call leaves every index of parked calls together.
--
-- unpark(pending_approvals, parked, tenant_parked, call_id):
--   pending_approvals  KEYS: parked calls by deadline (Keys.pending_approvals)
--   parked             KEYS: parked calls by parking time (Keys.parked)
--   tenant_parked      KEYS: the tenant's parked calls (Keys.tenant_parked)
local function unpark(pending_approvals, parked, tenant_parked, call_id)
  redis.call('ZREM', pending_approvals, call_id)
  redis.call('ZREM', parked, call_id)
  redis.call('ZREM', tenant_parked, call_id)
end
