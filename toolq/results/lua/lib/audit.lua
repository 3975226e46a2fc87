-- lib/audit.lua: the one place an audit entry is appended, as the next link of a hash chain.
--
-- audit_append(audit_stream, audit_chain, audit_maxlen, fields):
--   audit_stream  KEYS: the approval audit stream (Keys.audit_stream)
--   audit_chain   KEYS: the chain's state (Keys.audit_chain): seq, hash, first_seq, first_prev
--   audit_maxlen  the stream's approximate length cap
--   fields        the entry's fields, flat: {name1, value1, name2, value2, ...}
--
-- The entry gets seq (HINCRBY, so numbers are never reused), prev (the hash of the entry
-- before, or forty zeros for seq 1) and hash = SHA1(prev .. '\n' .. C), where C is every
-- field but prev and hash (seq included), sorted by name in byte order, each written as
-- <byte length of name>:<name><byte length of value>:<value>. toolq/results/audit_chain.py
-- computes the same bytes. One script appends the whole link, so concurrent writers cannot
-- fork the chain. When the length cap trims the stream's oldest entries, the first kept
-- entry's seq and prev are recorded (first_seq, first_prev): the verifier starts there.
-- Returns the new entry's stream id.
local AUDIT_GENESIS = string.rep('0', 40)

local function audit_bytes_less(a, b)
  -- Byte order: Lua's '<' on strings follows the server's collation locale.
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local function audit_append(audit_stream, audit_chain, audit_maxlen, fields)
  local values, names = {}, {}
  for i = 1, #fields, 2 do
    local name = fields[i]
    if name == 'seq' or name == 'prev' or name == 'hash' or values[name] then
      error('audit field ' .. name .. ' is reserved or repeated')
    end
    values[name] = fields[i + 1]
    names[#names + 1] = name
  end
  local seq = tostring(redis.call('HINCRBY', audit_chain, 'seq', 1))
  local prev = redis.call('HGET', audit_chain, 'hash') or AUDIT_GENESIS
  values['seq'] = seq
  names[#names + 1] = 'seq'
  table.sort(names, audit_bytes_less)
  local parts = {}
  for _, name in ipairs(names) do
    local value = values[name]
    parts[#parts + 1] = #name .. ':' .. name .. #value .. ':' .. value
  end
  local hash = redis.sha1hex(prev .. '\n' .. table.concat(parts))
  local before = redis.call('XLEN', audit_stream)
  local args = {'XADD', audit_stream, 'MAXLEN', '~', audit_maxlen, '*'}
  for _, v in ipairs(fields) do args[#args + 1] = v end
  for _, v in ipairs({'seq', seq, 'prev', prev, 'hash', hash}) do args[#args + 1] = v end
  local id = redis.call(unpack(args))
  redis.call('HSET', audit_chain, 'hash', hash)
  if redis.call('XLEN', audit_stream) <= before then
    local first = redis.call('XRANGE', audit_stream, '-', '+', 'COUNT', 1)[1]
    local kept = {}
    for i = 1, #first[2], 2 do kept[first[2][i]] = first[2][i + 1] end
    if kept['seq'] then
      redis.call('HSET', audit_chain, 'first_seq', kept['seq'], 'first_prev', kept['prev'])
    end
  end
  return id
end
