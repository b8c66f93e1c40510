-- smooth_bursty: Guava SmoothBursty decided as tryAcquire(cost, delay).
-- State: stored permits, next free ticket, last time seen.
SIZE[7] = function(p) return 3 end
A[7] = function(p, st, off, now, cost, delay, out)
  local rate, max_burst_seconds, idle_ttl = p[1], p[2], p[3]
  local interval = 1e6 / rate
  local max_permits = max_burst_seconds * rate
  local stored, next_free, last = 0, now, now
  if st and now - st[off + 2] < idle_ttl then
    stored, next_free, last = st[off + 1], st[off + 2], st[off + 3]
  end
  local t = max(now, last)
  local ok, reserved, wait, retry = false, false, 0, 0
  if next_free - delay > t then
    retry = ceil(next_free - t)
  else
    if t > next_free then
      stored = min(max_permits, stored + (t - next_free) / interval)
      next_free = t
    end
    local moment = next_free
    local spend = min(cost, stored)
    local fresh = cost - spend
    next_free = next_free + floor(fresh * interval)
    stored = stored - spend
    ok = true
    wait = max(moment - t, 0)
    reserved = wait > 0
  end
  out[off + 1] = stored
  out[off + 2] = next_free
  out[off + 3] = t
  local remaining = 0
  if not (next_free > t) then remaining = floor(stored) + 1 end
  local reset = max(next_free - t, 0) + ceil((max_permits - stored) * interval)
  return ok, reserved, wait, retry, remaining, reset, (t - now) + (max(next_free - t, 0) + idle_ttl)
end
