-- sliding_window_counter: ring of `buckets` sub-window counts aligned to window/buckets.
-- State: index of the newest sub-window, then one count per ring slot.
SIZE[3] = function(p) return 1 + p[3] end
A[3] = function(p, st, off, now, cost, delay, out)
  local limit, window, n = p[1], p[2], p[3]
  local width = window / n
  local k = floor(now / width)
  local newest = k
  if st then newest = st[off + 1] end
  for i = 0, n - 1 do
    if st then out[off + 2 + i] = st[off + 2 + i] else out[off + 2 + i] = 0 end
  end
  if k < newest then k = newest end
  if k > newest then
    local first = max(newest + 1, k - n + 1)
    for j = first, k do out[off + 2 + (j % n)] = 0 end
  end
  out[off + 1] = k
  local sum = 0
  for i = 0, n - 1 do sum = sum + out[off + 2 + i] end
  local t = max(now, k * width)
  local ok, retry = false, 0
  if sum + cost <= limit then
    ok = true
    out[off + 2 + (k % n)] = out[off + 2 + (k % n)] + cost
    sum = sum + cost
  else
    retry = window
    local freed = 0
    for j = k - n + 1, k do
      freed = freed + out[off + 2 + (j % n)]
      if sum - freed + cost <= limit then
        retry = (j + n) * width - t
        break
      end
    end
  end
  local reset = 0
  for j = k, k - n + 1, -1 do
    if out[off + 2 + (j % n)] > 0 then
      reset = (j + n) * width - t
      break
    end
  end
  return ok, false, 0, retry, max(0, limit - sum), reset, (t - now) + ((k + n + 1) * width - t)
end
