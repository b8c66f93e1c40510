-- fixed_window: counter reset at each window boundary (aligned to the epoch).
-- State: window start, count.
SIZE[1] = function(p) return 2 end
A[1] = function(p, st, off, now, cost, delay, out)
  local limit, window = p[1], p[2]
  local current = floor(now / window) * window
  local start, count = current, 0
  if st then start, count = st[off + 1], st[off + 2] end
  if current > start then
    start = current
    count = 0
  end
  -- Comparisons in place of math.max (the same results, no C call on the hot path).
  local t = now
  if start > now then t = start end
  local ok, retry, nxt = false, 0, count
  if count + cost <= limit then
    ok = true
    nxt = count + cost
  else
    retry = start + window - t
  end
  out[off + 1] = start
  out[off + 2] = nxt
  local reset = start + window - t
  local remaining = limit - nxt
  if not (remaining > 0) then remaining = 0 end
  return ok, false, 0, retry, remaining, reset, (t - now) + (reset + 1000)
end
