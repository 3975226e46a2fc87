-- REFUSE: a request refused because its run belongs to another principal or tenant. Every
-- refusal is counted (for /metrics); it is audited at most once per principal, target and
-- window, and at most per_window times per principal and window, so a flood of refused
-- requests cannot push real decisions out of the trimmed audit stream. The entry's fields
-- come from ARGV, with the signature the caller made over them (or the system mark).
-- Includes lib/audit.lua.
--
-- KEYS
--   1  counts   refusal counters (Keys.refusals): refused, audited
--   2  mark     set while this principal's refusal on this target is audited (Keys.refusal_mark)
--   3  budget   audit entries of this principal in the window (Keys.refusal_budget)
--   4  audit    the approval audit stream (Keys.audit_stream)
--   5  chain    the audit chain's state (Keys.audit_chain)
-- ARGV
--   1  window        (s)
--   2  per_window    audit entries a principal may write per window
--   3  audit_maxlen  the audit stream's approximate length cap
--   4  call_id       the audit entry's call
--   5  run_id        its run
--   6  tool          its tool
--   7  by            its principal
--   8  outcome       its outcome
--   9  ts            its time
--   10 proof_field   'sig' | 'system'
--   11 proof         the signature | '1'
-- Returns 1 (audited) | 0 (counted only).
local counts, mark, budget, audit, chain = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local window, per_window, audit_maxlen = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local call_id, run_id, tool, by, outcome, ts = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local proof_field, proof = ARGV[10], ARGV[11]

redis.call('HINCRBY', counts, 'refused', 1)
if not redis.call('SET', mark, '1', 'NX', 'EX', window) then return 0 end
local used = redis.call('INCR', budget)
if used == 1 then redis.call('EXPIRE', budget, window) end
if used > per_window then return 0 end
audit_append(audit, chain, audit_maxlen, {'call_id', call_id, 'run_id', run_id, 'tool', tool,
             'by', by, 'outcome', outcome, 'digest', '', 'ts', ts, proof_field, proof})
redis.call('HINCRBY', counts, 'audited', 1)
return 1
