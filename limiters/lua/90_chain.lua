-- The chain entry point: decides N >= 1 requests in arrival order, each all-or-nothing over
-- its layers (every layer decides first; state is written only when every enforced layer
-- admits; shadow layers never block and consume only when the request is admitted and they
-- would admit it). Each key is read once per call and written once (logs: one ZADD per
-- admitted request).
--
-- KEYS: every distinct layer key of the batch.
-- ARGV[1]: now_us ("" = Redis TIME). The other three are packed (struct, native order):
-- ARGV[2]: doubles, per spec: algorithm, shadow (0/1), delay_us, rule count, 4 numbers per rule.
-- ARGV[3]: doubles, per request: its cost, then (need, want) per leased layer, chain order.
-- ARGV[4]: uint16, per request: layer count, then (key index, spec index) per layer (1-based).
-- A layer count with 0x8000 added asks for the deciding layer's state if the request is
-- rejected (decider_state below); a spec index with 0x4000 added marks a leased layer (SPEC §2
-- `sync`): it decides `need` permits in place of the cost and, admitting them, takes up to
-- `want` at once (the request's need and a lease of the rest, whole permits), kept whatever
-- the other layers decide; it stays out of the header fold (the gateway adds its lease) and
-- its remaining is 0 when it refuses.
-- Returns one record per request: 11 packed doubles (the client truncates the first nine to
--       integers): allowed, deciding layer (0-based, -1 none; the rejecting layer with the
--       longest retry, first on ties), wait_us, retry_us, header layer (0-based, -1 none),
--       remaining, reset_us, rule, shadow mask, the script's now_us, and n; then n doubles of
--       the deciding layer's state when it was asked for; then 4 doubles per leased layer,
--       chain order: permits granted (0: it refused its need), remaining, reset_us, rule.
--
-- State strings are packed doubles: the rules' state, then the key's physical expiry on the
-- Redis clock (µs) and its logical expiry on the limiter clock. A write keeps the key's TTL
-- (SET KEEPTTL) unless the key is new or its TTL would end before the state's life does.
local tm = redis.call('TIME')
local rnow = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local now = rnow
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) end

-- Unpacks a string of `width`-byte `code` values into an array (in chunks: the Lua stack).
local FMT = {}
local function unpack_all(code, width, s)
  local n = #s / width
  if n <= 4000 then return {unpack_struct(string.rep(code, n), s)} end
  local out, pos = {}, 1
  while #out < n do
    local k = min(4000, n - #out)
    local chunk = {unpack_struct(string.rep(code, k), s, pos)}
    pos = chunk[k + 1]
    for j = 1, k do out[#out + 1] = chunk[j] end
  end
  return out
end

-- specs[si], and the same spec at si + 0x4000 (a leased layer's spec index; spec indices stay
-- below 0x4000), so the passes below look a layer's spec up without clearing that bit first.
local specs = {}
do
  local a = unpack_all('d', 8, ARGV[2])
  local i, n, si = 1, #ARGV[2] / 8, 0
  while i <= n do
    local algo, shadow, delay, nrules = a[i], a[i + 1] == 1, a[i + 2], a[i + 3]
    i = i + 4
    local rules, longest = {}, 0
    for r = 1, nrules do
      rules[r] = {a[i], a[i + 1], a[i + 2], a[i + 3]}
      if a[i + 1] > longest then longest = a[i + 1] end  -- max(longest, window), no C call
      i = i + 4
    end
    -- Per-spec constants, computed once per call rather than once per decision; the table is
    -- built in one constructor (adding its fields one by one costs rehashes).
    local spec
    if algo == 2 then
      spec = {algo = algo, shadow = shadow, delay = delay, rules = rules, longest = longest, shape = 0,
              one = false}
    else
      local sizes, total = {}, 0
      for r = 1, nrules do
        sizes[r] = SIZE[algo](rules[r])
        total = total + sizes[r]
      end
      local delay_in_force = delay
      if shadow then delay_in_force = 0 end
      -- shape: how many numbers the key's state string has (the rules' state, then the two
      -- expiries); one: the rule of a one-rule layer (most are), which skips the fold.
      spec = {algo = algo, shadow = shadow, delay = delay, rules = rules, longest = longest,
              fn = A[algo], sizes = sizes, total = total, shape = total + 2,
              delay_in_force = delay_in_force, one = nrules == 1 and rules[1]}
    end
    si = si + 1
    specs[si] = spec
    specs[si + 0x4000] = spec
  end
end
local costs = unpack_all('d', 8, ARGV[3])
local lay = unpack_all('H', 2, ARGV[4])
-- One pass counts the requests (one layer count each) and fills SHAPE[ki]: 0 for a key
-- holding a log, else how many numbers its state string has.
local nreq, SHAPE = 0, {}
do
  local i, n = 1, #ARGV[4] / 2
  while i <= n do
    local nl = lay[i]
    if nl >= 0x8000 then nl = nl - 0x8000 end
    nreq = nreq + 1
    for j = i + 1, i + 2 * nl, 2 do SHAPE[lay[j]] = specs[lay[j + 1]].shape end
    i = i + 1 + 2 * nl
  end
end

-- Load: one MGET for every state string, the newest entry of every log.
-- S[ki]: state numbers, SHAPE[ki] of them (false = none), PH[ki]: physical expiry (Redis µs).
local S, PH, LOG = {}, {}, {}
do
  local names, plain = {}, {}
  for ki = 1, #KEYS do
    if SHAPE[ki] == 0 then
      LOG[ki] = log_load(KEYS[ki])
    elseif SHAPE[ki] then
      plain[#plain + 1] = ki
      names[#names + 1] = KEYS[ki]
    end
  end
  if #plain > 0 then
    local raw
    if ARGV[5] then
      -- Cross-slot call (limiters/lua/cluster/cross_slot.lua): one MGET may not span slots.
      raw = {}
      for j = 1, #names do raw[j] = redis.call('GET', names[j]) end
    else
      raw = redis.call('MGET', unpack(names))
    end
    for j = 1, #plain do
      local ki, v = plain[j], raw[j]
      S[ki], PH[ki] = false, 0
      local n = SHAPE[ki]
      if v and #v == n * 8 then
        local f = FMT[n]
        if not f then
          f = string.rep('d', n)
          FMT[n] = f
        end
        -- One unpack (one C call) for the state and its last two numbers: the physical expiry,
        -- which holds even when the state has logically expired (the key is still there, so a
        -- write may keep its TTL), and the expiry on the limiter clock: expiry is logical, so
        -- decisions never depend on when Redis actually evicts the key.
        local s = {unpack_struct(f, v)}
        PH[ki] = s[n - 1]
        if s[n] > now then S[ki] = s end
      end
    end
  end
end

-- Per layer position of the current request, what its commit needs (reused, no table per
-- decision): admitted, the state's life (µs), a log entry's time, the key index, the spec.
local VA, VL, VX, VK, VP = {}, {}, {}, {}, {}
local SCR = {}  -- scratch state tables; a committed one becomes the key's, the key's old one scratch

-- Decides one request of `cost` for the plain (non-log) layer at position l. Returns
-- allowed, reserved, wait, retry, remaining, reset, rule; the state's life goes to VL[l].
-- (The main loop inlines it for a one-rule layer that is not leased.)
local function eval_plain(spec, ki, cost, l)
  local st = S[ki]  -- false: no state
  local out = SCR[l]
  if not out then
    out = {}
    SCR[l] = out
  end
  local delay = spec.delay_in_force
  local allowed, reserved, wait, retry, remaining, reset, rule = true, false, 0, 0, 0, 0, 0
  local best, worst, ttl, off = huge, -1, 0, 0
  local fn, sizes, rules = spec.fn, spec.sizes, spec.rules
  for r = 1, #rules do
    local ok, res, w, rt, rem, rs, tl = fn(rules[r], st, off, now, cost, delay, out)
    off = off + sizes[r]
    if tl > ttl then ttl = tl end  -- max(ttl, tl) without a C call
    if ok and res then
      reserved = true
      if w > wait then wait = w end
    end
    -- fold(): the rejecting rule with the longest retry, else the fewest permits left.
    if not ok then
      allowed = false
      if rt > worst then
        worst = rt
        retry, rule, remaining, reset = rt, r - 1, rem, rs
      end
    elseif worst < 0 and rem < best then
      best = rem
      rule, remaining, reset = r - 1, rem, rs
    end
  end
  if not allowed then
    reserved = false
    if delay > 0 and retry <= delay then wait = retry else wait = 0 end
  end
  VL[l] = ttl
  return allowed, reserved, wait, retry, remaining, reset, rule
end

local result = {}
local dirty, DT = {}, {}  -- keys to write, in first-write order; their state's life (µs from now)

-- The state a rejecting layer decided on, for the gateway's over-limit cache: packed doubles,
-- kind (0 = state numbers, 1 = log), the logical expiry on the limiter clock (0 = none), then
-- the rules' state numbers, or (time, permits) per log entry that a later decision can still
-- see. Empty when there is nothing to give (no state, or a log of more than 64 such entries).
local function decider_state(spec, ki, now)
  if spec.algo == 2 then
    local L = LOG[ki]
    if not L.newest then return '' end
    local t = max(now, L.newest)
    local r = redis.call('ZRANGE', L.key, '(' .. fmt('%.17g', t - spec.longest), '+inf', 'BYSCORE',
                         'LIMIT', 0, 65, 'WITHSCORES')
    if #r > 128 then return '' end
    local out = {pack('dd', 1, 0)}
    for j = 1, #r, 2 do
      local _, _, p = log_member(r[j])
      out[#out + 1] = pack('dd', tonumber(r[j + 1]), p)
    end
    return table.concat(out)
  end
  local st, total = S[ki], spec.total
  if not st then return '' end
  local f = FMT[total]
  if not f then
    f = string.rep('d', total)
    FMT[total] = f
  end
  local expiry = st[total + 2]
  if DT[ki] then expiry = now + DT[ki] end
  return pack('dd', 0, expiry) .. pack(f, unpack(st, 1, total))
end

local i, ci = 1, 1
for r = 1, nreq do
  local cost, nl = costs[ci], lay[i]
  ci = ci + 1
  local grants = ''
  local want_state = nl >= 0x8000
  if want_state then nl = nl - 0x8000 end
  -- One pass decides every layer and folds as it goes: the most restrictive rejecting
  -- layer decides (the longest retry, first on ties); an admitted request's header layer is
  -- the one with the fewest permits left (first on ties); shadow layers never count.
  local allowed, decider, retry, all_wait, shadow_mask = true, -1, 0, true, 0
  local rwait, dwait = 0, 0  -- the admitted request's reservation wait; the rejected one's
  local dm, ds, du = 0, 0, 0  -- the decider's remaining, reset, rule
  local header, best, bm, bs, bu = -1, huge, 0, 0, 0
  for l = 1, nl do
    local ki, si = lay[i + 2 * l - 1], lay[i + 2 * l]
    local spec, leased = specs[si], si >= 0x4000
    local a, res, w, rt, rem, rs, ru
    local one = spec.one
    if one and not leased then
      -- Most layers: eval_plain inline (no Lua call per layer), its fold of one rule reduced
      -- to the rule's outcome, with the same results.
      local out = SCR[l]
      if not out then
        out = {}
        SCR[l] = out
      end
      local delay, tl = spec.delay_in_force, 0
      a, res, w, rt, rem, rs, tl = spec.fn(one, S[ki], 0, now, cost, delay, out)
      ru = 0
      if tl > 0 then VL[l] = tl else VL[l] = 0 end  -- max(0, ttl), as the fold
      if a then
        if not (res and w > 0) then w = 0 end
        if not (rem < huge) then rem, rs = 0, 0 end
      else
        res = false
        if not (rt > -1) then rt, rem, rs = 0, 0, 0 end
        if not (delay > 0 and rt <= delay) then w = 0 else w = rt end
      end
    elseif leased then
      -- Twin of the leased branch of decide_chain (limiters/chain.cpp).
      local need, want = costs[ci], costs[ci + 1]
      ci = ci + 2
      a, res, w, rt, rem, rs, ru = eval_plain(spec, ki, need, l)
      if a then
        local g = need + min(want - need, rem)
        local gm, gs, gu = rem, rs, ru
        if g ~= need then
          -- A top-up: decided again for the whole grant (else the need's decision is the grant's).
          local _
          _, _, _, _, gm, gs, gu = eval_plain(spec, ki, g, l)
        end
        -- Taken now, whatever the other layers decide: the scratch becomes the key's state.
        local old = S[ki]
        S[ki] = SCR[l]
        SCR[l] = old or nil
        if not DT[ki] then dirty[#dirty + 1] = ki end
        DT[ki] = VL[l]
        grants = grants .. pack('dddd', g, gm, gs, gu)
      else
        rem = 0
        grants = grants .. pack('dddd', 0, 0, rs, ru)
      end
      VA[l], VK[l], VP[l] = false, ki, spec  -- nothing more to commit for it below
    elseif spec.algo == 2 then
      local t
      a, w, rt, rem, rs, ru, t = log_eval(spec, LOG[ki], now, cost)
      res = false
      VX[l] = t
      VL[l] = (t - now) + spec.longest + 1000
    else
      a, res, w, rt, rem, rs, ru = eval_plain(spec, ki, cost, l)
    end
    if not leased then VA[l], VK[l], VP[l] = a, ki, spec end
    if spec.shadow then
      if not a then shadow_mask = shadow_mask + 2 ^ (l - 1) end
    else
      if not a then
        if allowed or rt > retry then
          decider, retry, dm, ds, du = l - 1, rt, rem, rs, ru
        end
        allowed = false
        if w > 0 then
          if w > dwait then dwait = w end
        else
          all_wait = false
        end
      elseif res then
        if w > rwait then rwait = w end
      end
      if rem < best and not leased then
        best, header, bm, bs, bu = rem, l - 1, rem, rs, ru
      end
    end
  end
  local wait, rem, rs, ru = 0, 0, 0, 0
  if allowed then
    wait = rwait
    if header >= 0 then rem, rs, ru = bm, bs, bu end
    for l = 1, nl do
      if VA[l] then
        local ki, spec = VK[l], VP[l]
        if spec.algo == 2 then
          log_append(LOG[ki], VX[l], cost, spec.longest)
        else
          -- The scratch table becomes the key's state; the old state table the scratch.
          local old = S[ki]
          S[ki] = SCR[l]
          SCR[l] = old or nil
        end
        if not DT[ki] then dirty[#dirty + 1] = ki end
        DT[ki] = VL[l]
      end
    end
  else
    header = decider
    rem, rs, ru = dm, ds, du
    if all_wait then wait = dwait end
  end
  local extra = ''
  if want_state and not allowed then
    local ki, spec = lay[i + 2 * decider + 1], specs[lay[i + 2 * decider + 2]]
    extra = decider_state(spec, ki, now)
  end
  result[r] = pack('ddddddddddd', allowed and 1 or 0, decider, wait, retry, header, rem, rs, ru, shadow_mask,
                   now, #extra / 8) .. extra .. grants
  i = i + 1 + 2 * nl
end

-- Write: one SET per changed state (KEEPTTL while the key's TTL outlives the state), one
-- trim and PEXPIRE per changed log.
-- A TTL (ms) with slack, so that a busy key moves it rarely.
local function ttl_ms(ttl) return ceil((ttl + max(ttl / 2, 1000000)) / 1000) end
for j = 1, #dirty do
  local ki = dirty[j]
  local ttl = DT[ki]
  if LOG[ki] then
    log_flush(LOG[ki], ttl_ms(ttl))
  else
    local st, n = S[ki], SHAPE[ki]
    -- 5 ms of margin for Redis' millisecond expiry and the script's own run time.
    local ph, px = PH[ki], false
    if not (ph > 0 and rnow + ttl + 5000 <= ph) then
      -- New, or its TTL must move.
      px = ttl_ms(ttl)
      ph = rnow + px * 1000
    end
    local v
    if n == 4 then
      -- Two state numbers (most layers: one rule of two): the same bytes without unpack().
      v = pack('dddd', st[1], st[2], ph, now + ttl)
    else
      st[n - 1], st[n] = ph, now + ttl
      local f = FMT[n]
      if not f then
        f = string.rep('d', n)
        FMT[n] = f
      end
      v = pack(f, unpack(st, 1, n))
    end
    if px then
      redis.call('SET', KEYS[ki], v, 'PX', px)
    else
      redis.call('SET', KEYS[ki], v, 'KEEPTTL')
    end
  end
end
return table.concat(result)
