-- smooth_warming_up: Guava SmoothWarmingUp decided as tryAcquire(cost, delay); a new key is cold.
-- State: stored permits, next free ticket, last time seen.
SIZE[8] = function(p) return 3 end
A[8] = function(p, st, off, now, cost, delay, out)
  local rate, warmup, cold_factor = p[1], p[2], p[3]
  local stable = 1e6 / rate
  local cold = stable * cold_factor
  local threshold = 0.5 * warmup / stable
  local max_permits = threshold + 2.0 * warmup / (stable + cold)
  local slope = (cold - stable) / (max_permits - threshold)
  local cool_down = warmup / max_permits
  local stored, next_free, last = max_permits, now, now
  if st then stored, next_free, last = st[off + 1], st[off + 2], st[off + 3] end
  local t = max(now, last)
  -- storedPermitsToWaitTime: the trapezoid above the threshold, then the stable interval.
  local function stored_wait(stored_now, take)
    local above = stored_now - threshold
    local micros = 0
    if above > 0 then
      local above_take = min(above, take)
      local length = (stable + above * slope) + (stable + (above - above_take) * slope)
      micros = floor(above_take * length / 2.0)
      take = take - above_take
    end
    return micros + floor(stable * take)
  end
  local ok, reserved, wait, retry
  ok, reserved, wait, retry, stored, next_free =
    guava_acquire(stored, next_free, t, cost, delay, max_permits, cool_down, stable, stored_wait)
  out[off + 1] = stored
  out[off + 2] = next_free
  out[off + 3] = t
  local remaining = 0
  if not (next_free > t) then remaining = floor(stored) + 1 end
  local reset = max(next_free - t, 0) + ceil((max_permits - stored) * cool_down)
  return ok, reserved, wait, retry, remaining, reset, (t - now) + (reset + 1000)
end
