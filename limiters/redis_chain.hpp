// The Redis side of the limiters: encodes a batch of chains as one EVALSHA of the assembled
// chain script (limiters/lua/*.lua) and decodes its replies into chain_decisions (the wire
// format itself is limiters/redis/chain_codec.hpp).
#pragma once

#include <string_view>

#include "limiters/redis/chain_codec.hpp"

namespace rategate::limiters {

/// The assembled chain script (all algorithm files and the entry point, in name order).
std::string_view chain_script();

}  // namespace rategate::limiters
