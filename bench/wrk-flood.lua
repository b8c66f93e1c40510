-- wrk script: every request from one user (X-User-Id: $FLOOD_USER), as fast as the
-- connections go: the abusive client of bench/flood_bench.py.
local user = os.getenv("FLOOD_USER") or "flooder"
request = function()
  return wrk.format("GET", wrk.path, {["X-User-Id"] = user})
end
