-- leaky_bucket as a meter: the level drains at rate per period. State: level, last.
SIZE[4] = function(p) return 2 end
A[4] = function(p, st, off, now, cost, delay, out)
  local rate, period, capacity = p[1], p[2], p[3]
  local level, last = 0, now
  if st then level, last = st[off + 1], st[off + 2] end
  -- Comparisons in place of math.max (the same results, no C call on the hot path).
  local t = now
  if last > now then t = last end
  level = level - (t - last) * rate / period
  if not (level > 0) then level = 0 end
  local ok, reserved, wait, retry, nxt = false, false, 0, 0, level
  if level + cost <= capacity then
    ok = true
    nxt = level + cost
  else
    local w = ceil((level + cost - capacity) * period / rate)
    if delay > 0 and w <= delay and cost <= capacity then
      ok, reserved, wait = true, true, w
      nxt = level + cost
    else
      retry = w
    end
  end
  out[off + 1] = nxt
  out[off + 2] = t
  local reset = ceil(nxt * period / rate)
  local remaining = floor(capacity - nxt)
  if not (remaining > 0) then remaining = 0 end
  return ok, reserved, wait, retry, remaining, reset, (t - now) + (reset + 1000)
end
