#!lua flags=allow-cross-slot-keys
-- Put before the refund script (limiters/redis/refund.cpp, cross_slot_refund_script()) for Redis
-- Cluster: one call refunds the parts of many rejected requests whose keys live in different
-- slots of one master. As limiters/lua/cluster/cross_slot.lua: no declared keys, the keys after
-- the refund's one argument. A key this master does not serve fails the call ("non local key")
-- when it is reached, after the keys before it were refunded: such a call is not sent again
-- (that could refund twice); its remaining refunds are lost, an over-count only.
local KEYS = KEYS
if #KEYS == 0 then KEYS = {unpack(ARGV, 2)} end
