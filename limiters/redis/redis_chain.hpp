// What the Redis backends are built from: the chain script's source (the assembled
// limiters/lua/*.lua, and its cross-slot form for a Cluster master) and the connection settings
// of a config's `redis` section. Encoding a batch of chains and decoding the script's reply is
// chain_codec.hpp (included here for the callers that use both).
#pragma once

#include <string>
#include <string_view>

#include "config/config.hpp"
#include "limiters/redis/chain_codec.hpp"
#include "limiters/redis/connection.hpp"

namespace rategate::limiters {

/// The assembled chain script (all algorithm files and the entry point, in name order).
std::string_view chain_script();

/// The chain script for one master of a Redis Cluster: limiters/lua/cluster/cross_slot.lua,
/// then chain_script(). Called with no declared keys and the batch's keys after its four
/// arguments, it may decide keys of several slots of that master in one call (Redis 7.0+).
std::string cross_slot_chain_script();

/// The connection settings of a config's `redis` section: address or sentinels, credentials,
/// database; connect timeout 4x and watchdog 10x `command_timeout` (at least 200 / 500 ms).
redis::connection_settings connection_settings_of(const config::redis_config& r);

}  // namespace rategate::limiters
