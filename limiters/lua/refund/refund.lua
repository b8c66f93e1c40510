-- rategate refund script (standalone: not part of the chain script, no prelude). In Redis
-- Cluster a request's chain is decided in per-slot parts; when one part rejects, every part
-- that consumed is undone by one call of this script per part (all its keys in one slot).
--
-- KEYS: the part's layer keys that consumed.
-- ARGV[1]: packed doubles (struct, native order), per key in KEYS order: algorithm code,
--          rule count, 4 numbers per rule (as the chain script's spec encoding), cost
--          (permits), consumed_at (µs on the limiter clock: the `now` the consuming chain call
--          returned in its record field 10).
-- Returns the number of keys it changed (integer). It never reads Redis TIME: every time it
-- needs is consumed_at, on the clock the state was written with.
--
-- A state string (plain algorithms) is the rules' state, then the physical expiry (Redis µs)
-- and the logical expiry (limiter µs). A key that is missing, not a string, of the wrong
-- length for its rules or logically expired (logical expiry <= consumed_at) is left alone;
-- a changed key is written back with SET KEEPTTL (its TTL and expiry fields unchanged).
--
-- Why no refund ever lets a limit be exceeded (tc = consumed_at, per rule):
-- 1 fixed_window: takes the request's cost off the count of the window it was counted in,
--   only while the stored window is still that one; a rolled-over window is not touched.
-- 3 sliding_window_counter: takes the cost off the sub-window slot of tc, only while that
--   sub-window is still in the ring. (A request decided under a clock that stepped back was
--   counted in the newer slot: then an older slot gives it back; the window's sum is the
--   same until that older slot leaves, then higher: over-count only.)
-- 4, 5, 6, 7, 8 (the buckets): only while the state's last write is within cost x interval of
--   tc (see fresh_enough below): before that the bucket cannot have hit its cap since the
--   request, so giving the cost back restores exactly the state without it; after, nothing.
-- 4 leaky_bucket: the level drops by at most the cost it rose by (never below 0; `last` kept,
--   so no drain is credited twice).
-- 5 token_bucket: gives back at most the cost it took, capped at burst; 6 gcra: moves the TAT
--   back by at most the cost's emission time and never before tc. In each case the refund
--   returns at most what the request took, capped at the bucket's size, so the token
--   conservation law (admitted <= burst + rate x time) still holds.
-- 7 smooth_bursty, 8 smooth_warming_up: move the next free ticket back by at most the cost's
--   stable-rate time and never before tc, so never before the ticket the previous admission
--   left (it was at most tc, or this request pushed it by at least that time, to a µs of
--   rounding); stored permits the request spent are not given back. Admissions stay spaced by
--   the stable interval per permit and stored permits only fall, so admitted <= stored +
--   rate x time still holds. (A warming-up key left with fewer stored permits is warmer than
--   one that never saw the request: faster towards, never beyond, the stable rate.)
-- 2 sliding_window_log: removes one entry of the cost's permits, the OLDEST with score >= tc:
--   ours (appended at max(tc, newest) >= tc), or an identical one before it (a score between
--   tc and ours). The removed entry would have left every window no later than ours, which
--   stays: windows count at least the entries of the exact refund. (The newest match can be a
--   later request's entry: removing it would keep ours, which leaves the window before that
--   request's time does: an under-count. So never the newest.) Later entries keep their
--   running totals: the fast count c(newest) - c(first in window) + p(first) still includes a
--   removed middle entry while the window's first entry is older than it, an over-count only
--   (as if not refunded, for those windows), over at most one window after the removed
--   entry's time.
local floor, max, min = math.floor, math.max, math.min
local fmt, pack, unpack_struct = string.format, struct.pack, struct.unpack

-- Unpacks a string of 8-byte doubles into an array (in chunks: the Lua stack).
local function unpack_doubles(s)
  local n = #s / 8
  if n <= 4000 then return {unpack_struct(string.rep('d', n), s)} end
  local out, pos = {}, 1
  while #out < n do
    local k = min(4000, n - #out)
    local chunk = {unpack_struct(string.rep('d', k), s, pos)}
    pos = chunk[k + 1]
    for j = 1, k do out[#out + 1] = chunk[j] end
  end
  return out
end

-- A log member's permits: "c:p", "~c:p", or the older "time:permits:seq".
local function member_permits(m)
  local c, p = string.match(m, '^~?([^:]+):([^:]+)$')
  if not c then p = string.match(m, '^[^:]*:([^:]*):%d+$') end
  return p and tonumber(p)
end

-- State numbers per rule, as SIZE[] in the chain script.
local function state_size(algo, p)
  if algo == 3 then return 1 + p[3] end
  if algo == 7 or algo == 8 then return 3 end
  return 2
end

-- Per algorithm: refunds `cost` consumed at tc from one rule's state at st[off + 1 ...].
local R = {}
R[1] = function(p, st, off, cost, tc)
  local window = p[2]
  if st[off + 1] == floor(tc / window) * window then st[off + 2] = max(0, st[off + 2] - cost) end
end
R[3] = function(p, st, off, cost, tc)
  local n = p[3]
  local j = floor(tc / (p[2] / n))
  local newest = st[off + 1]
  if newest - n < j and j <= newest then
    local slot = off + 2 + (j % n)
    st[slot] = max(0, st[slot] - cost)
  end
end
-- The buckets (leaky, token, GCRA, Guava) give back only while the state's last write is
-- less than cost x interval after tc: the time the bucket needs to refill (drain) the cost it
-- took. Until then it cannot have reached its cap (full, empty, TAT overtaken, next free
-- ticket passed), so the state is exactly the one without the request, but for the cost:
-- giving the cost back is exact. Later, the cap may have absorbed part of the difference and a
-- full refund could give some of it twice; then nothing is given back (an over-count only).
local function fresh_enough(last, tc, cost, interval)
  return last - tc < cost * interval
end
R[4] = function(p, st, off, cost, tc)
  if fresh_enough(st[off + 2], tc, cost, p[2] / p[1]) then st[off + 1] = max(0, st[off + 1] - cost) end
end
R[5] = function(p, st, off, cost, tc)
  -- Never lowers tokens (a stored value above burst stays).
  if fresh_enough(st[off + 2], tc, cost, p[2] / p[1]) then
    st[off + 1] = max(st[off + 1], min(p[3], st[off + 1] + cost))
  end
end
R[6] = function(p, st, off, cost, tc)
  -- The same double arithmetic as the chain script (interval first). The state holds the TAT
  -- relative to its last write (tat - last): tc - last is tc on that scale.
  local interval = p[2] / p[1]
  local last = st[off + 2]
  if fresh_enough(last, tc, cost, interval) then
    st[off + 1] = min(st[off + 1], max(tc - last, st[off + 1] - cost * interval))
  end
end
local function guava(p, st, off, cost, tc)
  local stable = 1e6 / p[1]
  if fresh_enough(st[off + 3], tc, cost, stable) then
    st[off + 2] = min(st[off + 2], max(tc, st[off + 2] - floor(cost * stable)))
  end
end
R[7] = guava
R[8] = guava

-- Parse every item first: malformed arguments fail before anything is written.
local packed = ARGV[1] or ''
if #packed % 8 ~= 0 then return redis.error_reply('ERR refund: ARGV[1] is not packed doubles') end
local a = unpack_doubles(packed)
local na = #packed / 8
local items = {}
do
  local i = 1
  for k = 1, #KEYS do
    local algo, nrules = a[i], a[i + 1]
    if not algo or not R[algo] and algo ~= 2 or not nrules or nrules < 0 or nrules ~= floor(nrules)
       or i + 1 + 4 * nrules + 2 > na then
      return redis.error_reply('ERR refund: malformed arguments for key ' .. k)
    end
    local it = {key = KEYS[k], algo = algo, rules = {}}
    i = i + 2
    for r = 1, nrules do
      it.rules[r] = {a[i], a[i + 1], a[i + 2], a[i + 3]}
      i = i + 4
    end
    it.cost, it.tc = a[i], a[i + 1]
    if not (it.cost >= 0) then return redis.error_reply('ERR refund: bad cost for key ' .. k) end
    i = i + 2
    items[k] = it
  end
  if i - 1 ~= na then
    return redis.error_reply('ERR refund: ' .. na .. ' numbers for ' .. #KEYS .. ' keys')
  end
end

local cur = {}      -- key -> its current state string (false: none), once read or written
local changed, count = {}, 0
for k = 1, #items do
  local it = items[k]
  local key, cost, tc = it.key, it.cost, it.tc
  local did = false
  if it.algo == 2 then
    -- The oldest 64 entries from tc on (a cost-bounded read); pcall: a key of another type is
    -- left alone.
    local r = redis.pcall('ZRANGE', key, fmt('%.17g', tc), '+inf', 'BYSCORE', 'LIMIT', 0, 64)
    if type(r) == 'table' and not r.err then
      for j = 1, #r do
        if member_permits(r[j]) == cost then
          did = redis.call('ZREM', key, r[j]) == 1
          break
        end
      end
    end
  else
    local v = cur[key]
    if v == nil then
      v = redis.call('MGET', key)[1]  -- false for a missing key or one of another type
      cur[key] = v
    end
    if v then
      local total = 0
      for r = 1, #it.rules do total = total + state_size(it.algo, it.rules[r]) end
      local n = total + 2
      if #v == 8 * n then
        local f = string.rep('d', n)
        local st = {unpack_struct(f, v)}
        if st[n] > tc then
          local off, fn = 0, R[it.algo]
          for r = 1, #it.rules do
            fn(it.rules[r], st, off, cost, tc)
            off = off + state_size(it.algo, it.rules[r])
          end
          local nv = pack(f, unpack(st, 1, n))
          if nv ~= v then
            redis.call('SET', key, nv, 'KEEPTTL')
            cur[key] = nv
            did = true
          end
        end
      end
    end
  end
  if did and not changed[key] then
    changed[key] = true
    count = count + 1
  end
end
return count
