-- PAGE: one page of a sorted-set index after a cursor, read in one script so that entries
-- removed meanwhile cannot shift the page (ranks are read and used in the same script).
--
-- The order is (score, member), ascending, or both descending (ZREVRANGE's order). A cursor
-- is the (score, member) of the last entry of the previous page: the page starts right
-- after it, whether or not that entry is still there (if it left, the first entry past it
-- is found by a binary search over the entries of its score), so entries added anywhere
-- never repeat nor hide the entries already past or still ahead of the cursor.
--
-- KEYS
--   1 index   the sorted set (Keys.parked, Keys.tenant_parked, Keys.runs, ...)
-- ARGV
--   1 after_score   the cursor's score ('' = from the start)
--   2 after_member  the cursor's member
--   3 lo            the lowest score listed ('-inf' = none)
--   4 hi            the highest score listed ('+inf' = none)
--   5 count         how many entries at most
--   6 descending    '1': highest scores first
-- Returns {member, score, member, score, ...}, at most count entries.
local index = KEYS[1]
local after_score, after_member = ARGV[1], ARGV[2]
local lo, hi, count, descending = ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1'

local rank_of, range_of = 'ZRANK', 'ZRANGE'
if descending then rank_of, range_of = 'ZREVRANK', 'ZREVRANGE' end

-- How many entries come before every entry of score `bound` (exclusive) in this order.
local function before(bound)
  if descending then
    if bound == '+inf' then return 0 end
    return redis.call('ZCOUNT', index, string.format('(%s', bound), '+inf')
  end
  if bound == '-inf' then return 0 end
  return redis.call('ZCOUNT', index, '-inf', string.format('(%s', bound))
end

local start = before(descending and hi or lo)
if after_score ~= '' then
  local found = redis.call('ZSCORE', index, after_member)
  local from
  if found and tonumber(found) == tonumber(after_score) then
    from = redis.call(rank_of, index, after_member) + 1
  else
    local low = before(after_score)
    local high = low + redis.call('ZCOUNT', index, after_score, after_score)
    while low < high do
      local mid = math.floor((low + high) / 2)
      local member = redis.call(range_of, index, mid, mid)[1]
      local past = (member > after_member) ~= descending
      if past then high = mid else low = mid + 1 end
    end
    from = low
  end
  if from > start then start = from end
end
local got = redis.call(range_of, index, start, start + count - 1, 'WITHSCORES')
local out = {}
for i = 1, #got, 2 do
  local score = tonumber(got[i + 1])
  if descending and lo ~= '-inf' and score < tonumber(lo) then break end
  if not descending and hi ~= '+inf' and score > tonumber(hi) then break end
  out[#out + 1] = got[i]
  out[#out + 1] = got[i + 1]
end
return out
