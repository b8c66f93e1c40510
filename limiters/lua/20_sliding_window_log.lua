-- sliding_window_log: one ZSET entry per admitted request (member "time:permits:n", score =
-- time µs); exact. Decided in memory over the loaded log for every rule of the layer at once;
-- returns the verdict table and whether to append (time, cost). Mirrors sliding_window_log()
-- in limiters/algorithms.cpp.
local function log_eval(spec, log, now, cost)
  local t = now
  if #log > 0 then t = max(now, log[#log][1]) end
  local v = new_verdict()
  for i = 1, #spec.rules do
    local limit, window = spec.rules[i][1], spec.rules[i][2]
    local in_window = 0
    for _, e in ipairs(log) do
      if e[1] > t - window then in_window = in_window + e[2] end
    end
    local ok = in_window + cost <= limit
    local used = 0
    if ok then used = cost end
    local remaining = max(0, limit - in_window - used)
    local retry = 0
    if not ok then
      retry = window
      local need = in_window + cost - limit
      local freed = 0
      if cost <= limit then
        for _, e in ipairs(log) do
          if e[1] > t - window then
            freed = freed + e[2]
            if freed >= need then
              retry = e[1] + window - t
              break
            end
          end
        end
      end
    end
    -- The newest entry (this request) leaves the window last: reset is one window.
    fold(v, i - 1, ok, retry, remaining, window)
  end
  if not v.allowed and spec.delay > 0 and v.retry <= spec.delay and cost <= spec.rules[v.rule + 1][1] then
    v.wait = v.retry
  end
  return v, t
end
