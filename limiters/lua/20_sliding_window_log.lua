-- sliding_window_log: one ZSET entry per admitted request, score = time µs, exact. Mirrors
-- limiters/algorithms/sliding_window_log.cpp without reading the whole log: members are
-- "c:p" with p the permits and c the running total of permits, zero-padded so that entries
-- with one score sort by c (so the permits in a window are c(newest) - c(first in window) +
-- p(first), two O(log N) lookups). A non-integer cost makes
-- the key's later members "~c:p" and its decisions read the window (exact double sums, as the
-- twin), until every entry has left the longest window; "time:permits:seq" members (earlier
-- scripts) are read the same way.
-- Per log key and call, L holds: key, newest score / kind / c (kind "n" = "c:p", "f" = "~c:p",
-- "o" = older form, nil = empty) and a cache of window lookups (cleared on every write).

-- Parses a member: kind, c, permits.
local function log_member(m)
  local tilde, c, p = string.match(m, '^(~?)([^:]+):([^:]+)$')
  if c then return (tilde == '~') and 'f' or 'n', tonumber(c), tonumber(p) end
  local p2, seq = string.match(m, '^[^:]*:([^:]*):(%d+)$')
  return 'o', tonumber(seq) or 0, tonumber(p2) or 0
end

local function log_load(key)
  local L = {key = key, qx = {}, q = {}}
  local raw = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if raw[1] then
    L.newest = tonumber(raw[2])
    L.kind, L.c = log_member(raw[1])
  end
  return L
end

-- The first four entries (member, score, ...) with score > x, cached until the next write.
local function log_first(L, i, x)
  if L.qx[i] == x then return L.q[i] end
  local r = redis.call('ZRANGE', L.key, '(' .. fmt('%.17g', x), '+inf', 'BYSCORE', 'LIMIT', 0, 4, 'WITHSCORES')
  L.qx[i], L.q[i] = x, r
  return r
end

-- One rule's permits in the window (score > x) and the retry time, as the twin's two loops.
local function log_rule(L, i, t, window, limit, cost)
  local x = t - window
  local r = log_first(L, i, x)
  local in_window = 0
  local fast = false
  local kind0, c0, p0
  if r[1] then
    kind0, c0, p0 = log_member(r[1])
    fast = L.kind == 'n' and kind0 == 'n' and L.c == floor(L.c) and c0 == floor(c0) and p0 == floor(p0)
           and L.c < 9007199254740992
  end
  local all
  if not r[1] then
    in_window = 0
  elseif fast then
    in_window = L.c - (c0 - p0)
  else
    -- Exact double sums in log order, as the twin: read the window.
    all = redis.call('ZRANGE', L.key, '(' .. fmt('%.17g', x), '+inf', 'BYSCORE', 'WITHSCORES')
    for j = 1, #all, 2 do
      local _, _, p = log_member(all[j])
      in_window = in_window + p
    end
  end
  local ok = in_window + cost <= limit
  local used = 0
  if ok then used = cost end
  local remaining = max(0, limit - in_window - used)
  local retry = 0
  if not ok then
    retry = window
    local need = in_window + cost - limit
    if cost <= limit then
      if fast then
        -- The entry whose running total reaches c(before the window) + need; usually the first.
        local target = (c0 - p0) + need
        local n, off = 4, 0
        while true do
          local found = false
          for j = 1, #r, 2 do
            local _, c = log_member(r[j])
            if c >= target then
              retry = tonumber(r[j + 1]) + window - t
              found = true
              break
            end
          end
          if found or #r < 2 * n then break end
          off, n = off + n, n * 4
          r = redis.call('ZRANGE', L.key, '(' .. fmt('%.17g', x), '+inf', 'BYSCORE', 'LIMIT', off, n, 'WITHSCORES')
        end
      else
        local freed = 0
        for j = 1, #all, 2 do
          local _, _, p = log_member(all[j])
          freed = freed + p
          if freed >= need then
            retry = tonumber(all[j + 1]) + window - t
            break
          end
        end
      end
    end
  end
  return ok, retry, remaining
end

-- Decides one request for a log layer; returns allowed, wait, retry, remaining, reset, rule, t.
-- Folds the rules as verdict_fold in limiters/algorithms/twin.hpp: the layer admits only if
-- every rule does; its headers follow the rejecting rule with the longest retry, else the rule
-- with the fewest permits left (first on ties).
local function log_eval(spec, L, now, cost)
  local t = now
  if L.newest then t = max(now, L.newest) end
  local allowed, retry, remaining, reset, rule = true, 0, 0, 0, 0
  local best, worst = huge, -1
  local rules = spec.rules
  for i = 1, #rules do
    local limit, window = rules[i][1], rules[i][2]
    local ok, rt, rem = log_rule(L, i, t, window, limit, cost)
    -- The newest entry (this request) leaves the window last: reset is one window.
    if not ok then
      allowed = false
      if rt > worst then
        worst = rt
        retry, rule, remaining, reset = rt, i - 1, rem, window
      end
    elseif worst < 0 and rem < best then
      best = rem
      rule, remaining, reset = i - 1, rem, window
    end
  end
  local wait = 0
  if not allowed and spec.delay > 0 and retry <= spec.delay and cost <= rules[rule + 1][1] then
    wait = retry
  end
  return allowed, wait, retry, remaining, reset, rule, t
end

-- Appends `cost` permits at t (the request passed); trimming and the TTL wait for log_flush.
local function log_append(L, t, cost, longest)
  local c, member
  if L.kind == nil or L.newest <= t - longest then
    -- Every stored entry has left the longest window: drop them and start the total afresh.
    if L.kind ~= nil then redis.call('ZREMRANGEBYSCORE', L.key, '-inf', fmt('%.17g', t - longest)) end
    c = cost
    if cost == floor(cost) then
      member = fmt('%016d:%.17g', c, cost)
      L.kind = 'n'
    else
      member = fmt('~%026.9f:%.17g', c, cost)
      L.kind = 'f'
    end
  else
    c = L.c + cost
    if L.kind == 'n' and cost == floor(cost) and c < 9007199254740992 then
      member = fmt('%016d:%.17g', c, cost)
    else
      member = fmt('~%026.9f:%.17g', c, cost)
      L.kind = 'f'
    end
  end
  redis.call('ZADD', L.key, fmt('%.17g', t), member)
  L.newest, L.c = t, c
  L.trim = t - longest
  for i in pairs(L.qx) do L.qx[i] = nil end
end

local function log_flush(L, px)
  redis.call('ZREMRANGEBYSCORE', L.key, '-inf', fmt('%.17g', L.trim))
  redis.call('PEXPIRE', L.key, px)
end
