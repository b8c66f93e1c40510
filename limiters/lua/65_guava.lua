-- Guava SmoothRateLimiter, shared by smooth_bursty and smooth_warming_up: tryAcquire(cost,
-- timeout = delay) at time t — canAcquire, then resync and reserveEarliestAvailable.
-- stored_wait(stored, spend) is the subclass's storedPermitsToWaitTime. Mirrors guava_acquire()
-- in limiters/algorithms/guava.hpp. Returns ok, reserved, wait, retry, stored, next_free.
local function guava_acquire(stored, next_free, t, cost, delay, max_permits, cool_down, stable, stored_wait)
  if next_free - delay > t then
    return false, false, 0, ceil(next_free - t), stored, next_free
  end
  if t > next_free then
    stored = min(max_permits, stored + (t - next_free) / cool_down)
    next_free = t
  end
  local moment = next_free
  local spend = min(cost, stored)
  local fresh = cost - spend
  next_free = next_free + (stored_wait(stored, spend) + floor(fresh * stable))
  stored = stored - spend
  local wait = max(moment - t, 0)
  return true, wait > 0, wait, 0, stored, next_free
end
