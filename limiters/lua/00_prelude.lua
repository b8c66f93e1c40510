-- rategate chain script, assembled at build time from limiters/lua/*.lua in name order.
-- Every algorithm mirrors limiters/algorithms/<algorithm>.cpp line for line (same arithmetic in
-- the same order), so Redis and the in-process twin give identical decisions.
-- A rule function gets (p, st, off, now, cost, delay, out): p = the rule's four numbers,
-- st = the layer's state numbers (nil for a new key), off = this rule's offset in st and out.
-- It writes the state to store on admission into out and returns
-- ok, reserved, wait, retry, remaining, reset, ttl (µs).
-- Hot paths keep their values in locals and reused tables: no table per decision.
local floor, ceil, max, min, huge = math.floor, math.ceil, math.max, math.min, math.huge
local fmt, pack, unpack_struct = string.format, struct.pack, struct.unpack
local A = {}
local SIZE = {}
