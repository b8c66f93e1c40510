-- token_bucket with lazy refill, starting full. State: tokens, last.
SIZE[5] = function(p) return 2 end
A[5] = function(p, st, off, now, cost, delay, out)
  local rate, period, burst = p[1], p[2], p[3]
  local tokens, last = burst, now
  if st then tokens, last = st[off + 1], st[off + 2] end
  -- Comparisons in place of math.max/min (the same results, no C call on the hot path).
  local t = now
  if last > now then t = last end
  local refill = tokens + (t - last) * rate / period
  if refill < burst then tokens = refill else tokens = burst end
  local ok, reserved, wait, retry, left = false, false, 0, 0, tokens
  if tokens >= cost then
    ok = true
    left = tokens - cost
  else
    local w = ceil((cost - tokens) * period / rate)
    if delay > 0 and w <= delay and cost <= burst then
      ok, reserved, wait = true, true, w
      left = tokens - cost
    else
      retry = w
    end
  end
  out[off + 1] = left
  out[off + 2] = t
  local reset = ceil((burst - left) * period / rate)
  local remaining = floor(left)
  if not (remaining > 0) then remaining = 0 end
  return ok, reserved, wait, retry, remaining, reset, (t - now) + (reset + 1000)
end
