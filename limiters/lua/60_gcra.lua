-- gcra: generic cell rate algorithm (theoretical arrival time). State: tat, last.
SIZE[6] = function(p) return 2 end
A[6] = function(p, st, off, now, cost, delay, out)
  local rate, period, burst = p[1], p[2], p[3]
  local interval = period / rate
  local tat, last = now, now
  if st then tat, last = st[off + 1], st[off + 2] end
  -- Comparisons in place of math.max (the same results, no C call on the hot path).
  local t = now
  if last > now then t = last end
  local base = tat
  if t > tat then base = t end
  local new_tat = base + cost * interval
  local allow_at = new_tat - burst * interval
  local ok, reserved, wait, retry, kept = false, false, 0, 0, base
  if allow_at <= t then
    ok = true
    kept = new_tat
  else
    local w = ceil(allow_at - t)
    if delay > 0 and w <= delay and cost <= burst then
      ok, reserved, wait = true, true, w
      kept = new_tat
    else
      retry = w
    end
  end
  out[off + 1] = kept
  out[off + 2] = t
  local reset = ceil(kept - t)
  local remaining = floor((burst * interval - (kept - t)) / interval)
  if not (remaining > 0) then remaining = 0 end
  return ok, reserved, wait, retry, remaining, reset, (t - now) + (reset + 1000)
end
