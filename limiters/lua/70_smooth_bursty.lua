-- smooth_bursty: Guava SmoothBursty decided as tryAcquire(cost, delay).
-- State: stored permits, next free ticket, last time seen; a key idle for idle_ttl past its
-- next free ticket is a fresh limiter (no stored permits).
SIZE[7] = function(p) return 3 end
local function no_stored_wait() return 0 end
A[7] = function(p, st, off, now, cost, delay, out)
  local rate, max_burst_seconds, idle_ttl = p[1], p[2], p[3]
  local interval = 1e6 / rate
  local max_permits = max_burst_seconds * rate
  local stored, next_free, last = 0, now, now
  if st and now - st[off + 2] < idle_ttl then
    stored, next_free, last = st[off + 1], st[off + 2], st[off + 3]
  end
  local t = max(now, last)
  local ok, reserved, wait, retry
  ok, reserved, wait, retry, stored, next_free =
    guava_acquire(stored, next_free, t, cost, delay, max_permits, interval, interval, no_stored_wait)
  out[off + 1] = stored
  out[off + 2] = next_free
  out[off + 3] = t
  local remaining = 0
  if not (next_free > t) then remaining = floor(stored) + 1 end
  local reset = max(next_free - t, 0) + ceil((max_permits - stored) * interval)
  return ok, reserved, wait, retry, remaining, reset, (t - now) + (max(next_free - t, 0) + idle_ttl)
end
