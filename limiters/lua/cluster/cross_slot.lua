#!lua flags=allow-cross-slot-keys
-- Put before the chain script (limiters/redis/redis_chain.cpp, cross_slot_chain_script()) for Redis
-- Cluster: one call decides the parts of many requests whose keys live in different slots of
-- one master. Redis refuses declared keys of several slots (CROSSSLOT), so the call declares
-- none and passes the keys after the chain's four arguments; the flag lets the script touch
-- them, and Redis fails the call ("non local key") before anything is written if one of them
-- is not served here (every key is read before any write), so the gateway can then send the
-- parts slot by slot instead. Needs Redis 7.0 or newer (script flags).
local KEYS = KEYS
if #KEYS == 0 then KEYS = {unpack(ARGV, 5)} end
