-- gcra: generic cell rate algorithm (theoretical arrival time). State: the TAT relative to the
-- last write (µs, tat - last), last (µs): an absolute TAT near 1.7e15 µs holds only quarters of
-- a µs, and rounding each emission interval to that grid admitted more than the rate. Every
-- time below is relative to t, small and exact.
SIZE[6] = function(p) return 2 end
A[6] = function(p, st, off, now, cost, delay, out)
  local rate, period, burst = p[1], p[2], p[3]
  local interval = period / rate
  local ahead, last = 0, now
  if st then ahead, last = st[off + 1], st[off + 2] end
  -- Comparisons in place of math.max (the same results, no C call on the hot path).
  local t = now
  if last > now then t = last end
  local base = ahead - (t - last)  -- max(tat, t) - t
  if not (base > 0) then base = 0 end
  local new_tat = base + cost * interval  -- new TAT - t
  local allow_at = new_tat - burst * interval  -- when the request conforms, - t
  local ok, reserved, wait, retry, kept = false, false, 0, 0, base
  if allow_at <= 0 then
    ok = true
    kept = new_tat
  else
    local w = ceil(allow_at)
    if delay > 0 and w <= delay and cost <= burst then
      ok, reserved, wait = true, true, w
      kept = new_tat
    else
      retry = w
    end
  end
  out[off + 1] = kept
  out[off + 2] = t
  local reset = ceil(kept)
  local remaining = floor((burst * interval - kept) / interval)
  if not (remaining > 0) then remaining = 0 end
  return ok, reserved, wait, retry, remaining, reset, (t - now) + (reset + 1000)
end
