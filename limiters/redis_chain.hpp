// The Redis side of the limiters: encodes a batch of chains as one EVALSHA of the assembled
// chain script (limiters/lua/*.lua) and decodes its replies into chain_decisions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "limiters/chain.hpp"
#include "limiters/local_store.hpp"
#include "limiters/redis/reply.hpp"

namespace rategate::limiters {

/// The assembled chain script (all algorithm files and the entry point, in name order).
std::string_view chain_script();

/// Builds KEYS and ARGV for one call deciding `requests` (each a chain and a cost) in order.
/// `now_us` < 0 means "use Redis TIME" (clock "redis"). ARGV is the time and three packed
/// binary strings (specs, costs, layers; layout in limiters/lua/90_chain.lua).
struct chain_batch {
    std::vector<std::string> keys;
    std::vector<std::string> args;
    std::size_t requests = 0;
};
chain_batch encode_batch(
    const std::vector<std::pair<const std::vector<layer_ref>*, double>>& requests, double now_us);

/// Decodes the script's reply (9 packed doubles per request, truncated to integers as an
/// integer reply would be). Returns false on a malformed reply.
bool decode_batch(const redis::reply& r, std::vector<chain_decision>& out);

}  // namespace rategate::limiters
