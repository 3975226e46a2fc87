-- AUDIT: append one audit entry written in Python (decisions refused before any script,
-- run-rule refusals, a worker's unverified approval), through lib/audit.lua like every
-- other audit entry. Includes lib/audit.lua.
--
-- KEYS
--   1  audit_stream  the approval audit stream (Keys.audit_stream)
--   2  audit_chain   the chain's state (Keys.audit_chain)
-- ARGV
--   1  audit_maxlen  the audit stream's approximate length cap
--   2..  the entry's fields: name, value, name, value, ...
-- Returns the entry's stream id.
local audit_stream, audit_chain = KEYS[1], KEYS[2]
local audit_maxlen = ARGV[1]
local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
return audit_append(audit_stream, audit_chain, audit_maxlen, fields)
