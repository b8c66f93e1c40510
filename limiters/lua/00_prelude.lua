-- rategate chain script, assembled at build time from limiters/lua/*.lua in name order.
-- Every algorithm mirrors limiters/algorithms.cpp line for line (same double arithmetic in
-- the same order), so Redis and the in-process twin give identical decisions.
-- A rule function gets (p, st, off, now, cost, delay, out): p = the rule's four numbers,
-- st = the layer's state numbers (nil for a new key), off = this rule's offset in st and out.
-- It writes the state to store on admission into out and returns
-- ok, reserved, wait, retry, remaining, reset, ttl (µs).
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local A = {}
local SIZE = {}

-- Folds one rule's outcome into the layer's verdict v: the layer admits only if every rule does;
-- its headers follow the rejecting rule with the longest retry, else the rule with the fewest
-- permits left (first on ties). Twin: verdict_fold in limiters/algorithms.cpp.
local function new_verdict()
  return {allowed = true, reserved = false, wait = 0, retry = 0, remaining = 0, reset = 0, rule = 0,
          best_remaining = math.huge, worst_retry = -1}
end
local function fold(v, rule, ok, retry, remaining, reset)
  if not ok then
    v.allowed = false
    if retry > v.worst_retry then
      v.worst_retry = retry
      v.retry, v.rule, v.remaining, v.reset = retry, rule, remaining, reset
    end
  elseif v.worst_retry < 0 and remaining < v.best_remaining then
    v.best_remaining = remaining
    v.rule, v.remaining, v.reset = rule, remaining, reset
  end
end
