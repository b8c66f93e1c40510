-- The chain entry point: decides N >= 1 requests in arrival order, each all-or-nothing over
-- its layers (every layer decides first; state is written only when every enforced layer
-- admits; shadow layers never block and consume only when the request is admitted and they
-- would admit it). Each key is read once and written once per call.
--
-- KEYS: every distinct layer key of the batch.
-- ARGV: now_us ("" = Redis TIME), spec count, per spec: algorithm, shadow (0/1), delay_us,
--       rule count, 4 numbers per rule; request count, per request: cost, layer count,
--       then (key index, spec index) per layer (1-based).
-- Returns 9 integers per request: allowed, deciding layer (0-based, -1 none), wait_us,
--       retry_us, header layer (0-based, -1 none), remaining, reset_us, rule, shadow mask.
local now
if ARGV[1] == '' then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
else
  now = tonumber(ARGV[1])
end
local specs = {}
local i = 3
for s = 1, tonumber(ARGV[2]) do
  local spec = {algo = tonumber(ARGV[i]), shadow = ARGV[i + 1] == '1', delay = tonumber(ARGV[i + 2]), rules = {}}
  local nrules = tonumber(ARGV[i + 3])
  i = i + 4
  for r = 1, nrules do
    spec.rules[r] = {tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])}
    i = i + 4
  end
  spec.longest = 0
  for _, r in ipairs(spec.rules) do spec.longest = max(spec.longest, r[2]) end
  -- Per-spec constants, computed once per call rather than once per decision.
  if spec.algo ~= 2 then
    spec.fn = A[spec.algo]
    spec.sizes = {}
    spec.total = 0
    for r, p in ipairs(spec.rules) do
      spec.sizes[r] = SIZE[spec.algo](p)
      spec.total = spec.total + spec.sizes[r]
    end
    spec.delay_in_force = spec.delay
    if spec.shadow then spec.delay_in_force = 0 end
  end
  specs[s] = spec
end
local nreq = tonumber(ARGV[i])
i = i + 1
local requests = {}
local key_algo = {}
for r = 1, nreq do
  local req = {cost = tonumber(ARGV[i]), layers = {}}
  local nl = tonumber(ARGV[i + 1])
  i = i + 2
  for l = 1, nl do
    local ki, si = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    req.layers[l] = {ki, si}
    key_algo[ki] = specs[si].algo
    i = i + 2
  end
  requests[r] = req
end

-- Load: one MGET for every state string, one ZRANGE per log.
local state = {}
local plain = {}
for ki, algo in pairs(key_algo) do
  if algo == 2 then
    local raw = redis.call('ZRANGE', KEYS[ki], 0, -1, 'WITHSCORES')
    local log = {}
    local seq = 0
    for j = 1, #raw, 2 do
      local permits, n = string.match(raw[j], '^[^:]*:([^:]*):(%d+)$')
      log[#log + 1] = {tonumber(raw[j + 1]), tonumber(permits)}
      seq = max(seq, tonumber(n))
    end
    state[ki] = {log = log, added = {}, seq = seq}
  else
    plain[#plain + 1] = ki
  end
end
if #plain > 0 then
  local names = {}
  for j, ki in ipairs(plain) do names[j] = KEYS[ki] end
  local raw = redis.call('MGET', unpack(names))
  for j, ki in ipairs(plain) do
    local values = nil
    if raw[j] and #raw[j] % 8 == 0 and #raw[j] > 0 then
      -- State is packed binary doubles (struct): exact, and cheaper than text both ways.
      values = {struct.unpack(string.rep('d', #raw[j] / 8), raw[j])}
      values[#values] = nil  -- unpack's trailing "next position"
      -- The last number is the expiry on the limiter clock: expiry is logical, so decisions
      -- never depend on when Redis actually evicts the key.
      local expires = table.remove(values)
      if expires == nil or expires <= now then values = nil end
    end
    state[ki] = {values = values}
  end
end

local function evaluate(spec, st, cost)
  if spec.algo == 2 then
    local v, t = log_eval(spec, st.log, now, cost)
    return v, t, (t - now) + spec.longest + 1000
  end
  local values = st.values
  if values ~= nil and #values ~= spec.total then values = nil end
  local out = {}
  local delay = spec.delay_in_force
  local v = new_verdict()
  local ttl = 0
  local off = 0
  local fn, sizes = spec.fn, spec.sizes
  for r, p in ipairs(spec.rules) do
    local ok, res, w, rt, rem, rs, tl = fn(p, values, off, now, cost, delay, out)
    off = off + sizes[r]
    ttl = max(ttl, tl)
    if ok and res then
      v.reserved = true
      v.wait = max(v.wait, w)
    end
    fold(v, r - 1, ok, rt, rem, rs)
  end
  if not v.allowed then
    v.reserved = false
    if delay > 0 and v.retry <= delay then v.wait = v.retry else v.wait = 0 end
  end
  return v, out, ttl
end

local result = {}
local dirty = {}
for _, req in ipairs(requests) do
  local verdicts, nexts, ttls = {}, {}, {}
  for l, layer in ipairs(req.layers) do
    verdicts[l], nexts[l], ttls[l] = evaluate(specs[layer[2]], state[layer[1]], req.cost)
  end
  local allowed, decider, wait, retry, all_wait = true, -1, 0, 0, true
  local shadow_mask = 0
  for l, layer in ipairs(req.layers) do
    local v = verdicts[l]
    if specs[layer[2]].shadow then
      if not v.allowed then shadow_mask = shadow_mask + 2 ^ (l - 1) end
    elseif not v.allowed then
      if allowed then decider = l - 1 end
      allowed = false
      retry = max(retry, v.retry)
      if v.wait > 0 then wait = max(wait, v.wait) else all_wait = false end
    end
  end
  if allowed then
    wait = 0
    for l, layer in ipairs(req.layers) do
      local v = verdicts[l]
      if v.allowed then
        local ki, spec = layer[1], specs[layer[2]]
        if not spec.shadow and v.reserved then wait = max(wait, v.wait) end
        if spec.algo == 2 then
          local st = state[ki]
          st.log[#st.log + 1] = {nexts[l], req.cost}
          st.added[#st.added + 1] = {nexts[l], req.cost}
          st.trim = nexts[l] - spec.longest
        else
          state[ki].values = nexts[l]
          state[ki].expires = now + ttls[l]
        end
        dirty[ki] = ttls[l]
      end
    end
  elseif not all_wait then
    wait = 0
  end
  local header = -1
  if not allowed then
    header = decider
  else
    local best = math.huge
    for l, layer in ipairs(req.layers) do
      if not specs[layer[2]].shadow and verdicts[l].remaining < best then
        best = verdicts[l].remaining
        header = l - 1
      end
    end
  end
  local hv = {remaining = 0, reset = 0, rule = 0}
  if header >= 0 then hv = verdicts[header + 1] end
  local n = #result
  result[n + 1] = allowed and 1 or 0
  result[n + 2] = decider
  result[n + 3] = wait
  result[n + 4] = retry
  result[n + 5] = header
  result[n + 6] = hv.remaining
  result[n + 7] = hv.reset
  result[n + 8] = hv.rule
  result[n + 9] = shadow_mask
end

-- Write: one SET (or one ZADD batch) per changed key, with its TTL.
for ki, ttl in pairs(dirty) do
  local px = max(1, ceil(ttl / 1000))
  local st = state[ki]
  if st.log then
    redis.call('ZREMRANGEBYSCORE', KEYS[ki], '-inf', string.format('%.17g', st.trim))
    local args = {}
    for j, e in ipairs(st.added) do
      -- Members stay unique: the sequence continues from the highest one stored.
      args[#args + 1] = string.format('%.17g', e[1])
      args[#args + 1] = string.format('%.17g:%.17g:%d', e[1], e[2], st.seq + j)
    end
    redis.call('ZADD', KEYS[ki], unpack(args))
    redis.call('PEXPIRE', KEYS[ki], px)
  else
    local values = st.values
    values[#values + 1] = st.expires
    redis.call('SET', KEYS[ki], struct.pack(string.rep('d', #values), unpack(values)), 'PX', px)
  end
end
return result
