-- rategate give-back script (standalone: not part of the chain script, no prelude). A loop's
-- lease of a shared layer (SPEC §2 `sync`) that went unused returns its permits to the counter
-- in Redis. Twin: give_back_permits() in limiters/lease_give_back.cpp.
--
-- KEYS: the leased layer keys (one slot per call on a Cluster).
-- ARGV[1]: packed doubles (struct, native order), per key in KEYS order: algorithm code, rule
--          count, 4 numbers per rule (as the chain script's spec encoding), permits, granted_at
--          (µs on the limiter clock: the `now` of the earliest chain call that granted them).
-- Returns the number of keys it changed (integer). It never reads Redis TIME.
--
-- Per rule: 5 token_bucket: tokens += permits, capped at burst (never lowered): the bucket's
-- tokens plus every loop's unspent permits never exceed burst + N x loops, so admissions over
-- any interval stay within burst + rate x time + N x loops. 1 fixed_window: count -= permits
-- (not below 0) only while the stored window is the one of granted_at: the permits were counted
-- there and never admitted, so the window's admissions stay within its limit. Other algorithms
-- take no lease and are left alone; so is a key that is missing, of the wrong length or
-- logically expired (logical expiry <= granted_at). A changed key keeps its TTL (SET KEEPTTL).
local floor, min, max = math.floor, math.min, math.max
local pack, unpack_struct = struct.pack, struct.unpack

local packed = ARGV[1] or ''
if #packed % 8 ~= 0 then return redis.error_reply('ERR give back: ARGV[1] is not packed doubles') end
local n_all = #packed / 8
local a = {}
for j = 1, n_all, 4000 do
  local k = min(4000, n_all - j + 1)
  local chunk = {unpack_struct(string.rep('d', k), packed, (j - 1) * 8 + 1)}
  for q = 1, k do a[j + q - 1] = chunk[q] end
end

-- Parse every item first: malformed arguments fail before anything is written.
local items, i = {}, 1
for k = 1, #KEYS do
  local algo, nrules = a[i], a[i + 1]
  if not algo or not nrules or nrules < 0 or nrules ~= floor(nrules) or i + 1 + 4 * nrules + 2 > n_all then
    return redis.error_reply('ERR give back: malformed arguments for key ' .. k)
  end
  local it = {algo = algo, rules = {}}
  i = i + 2
  for r = 1, nrules do
    it.rules[r] = {a[i], a[i + 1], a[i + 2], a[i + 3]}
    i = i + 4
  end
  it.permits, it.tc = a[i], a[i + 1]
  if not (it.permits >= 0) then return redis.error_reply('ERR give back: bad permits for key ' .. k) end
  i = i + 2
  items[k] = it
end
if i - 1 ~= n_all then return redis.error_reply('ERR give back: ' .. n_all .. ' numbers for ' .. #KEYS .. ' keys') end

local count = 0
for k = 1, #items do
  local it = items[k]
  if it.algo == 1 or it.algo == 5 then
    local v = redis.call('MGET', KEYS[k])[1]  -- false for a missing key or one of another type
    local n = 2 * #it.rules + 2  -- both algorithms keep two numbers per rule
    if v and #v == 8 * n then
      local f = string.rep('d', n)
      local st = {unpack_struct(f, v)}
      if st[n] > it.tc then
        for r, p in ipairs(it.rules) do
          local off = 2 * (r - 1)
          if it.algo == 5 then
            st[off + 1] = max(st[off + 1], min(p[3], st[off + 1] + it.permits))
          elseif st[off + 1] == floor(it.tc / p[2]) * p[2] then
            st[off + 2] = max(0, st[off + 2] - it.permits)
          end
        end
        local nv = pack(f, unpack(st, 1, n))
        if nv ~= v then
          redis.call('SET', KEYS[k], nv, 'KEEPTTL')
          count = count + 1
        end
      end
    end
  end
end
return count
