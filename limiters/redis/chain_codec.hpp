// The wire format of the chain script (limiters/lua/90_chain.lua), sans-I/O: a batch of
// chains encoded as KEYS and packed ARGV, and the packed reply decoded into chain_decisions
// and the deciding layers' states. tests/fuzz/fuzz_chain_reply.cpp feeds the decoder.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "limiters/chain.hpp"
#include "limiters/local/local_store.hpp"
#include "limiters/redis/reply.hpp"

namespace rategate::limiters {

/// Builds KEYS and ARGV for one call deciding `requests` (each a chain and a cost) in order.
/// `now_us` < 0 means "use Redis TIME" (clock "redis"). ARGV is the time and three packed
/// binary strings (specs, costs, layers; layout in limiters/lua/90_chain.lua). Where
/// `want_state` (parallel to `requests`, may be null) is true, the reply carries the deciding
/// layer's state if that request is rejected (for the over-limit cache). A layer_ref with a
/// lease ask (`lease.want` > 0) goes as a leased layer (SPEC §2 `sync`).
struct chain_batch {
    std::vector<std::string_view> keys;  ///< views of the requests' layer keys: keep them alive
    std::vector<std::string> args;
    std::size_t requests = 0;
};
chain_batch encode_batch(
    const std::vector<std::pair<const std::vector<layer_ref>*, double>>& requests, double now_us,
    const std::vector<bool>* want_state = nullptr);

/// A number as the script's reply gives it: truncated toward zero, as an integer reply would
/// be (0 outside ±9.2e18).
double reply_number(double v);

/// Decodes the script's reply (per request: nine numbers truncated to integers as an integer
/// reply would be, the script's clock, then the deciding layer's state if asked for, then one
/// lease record per leased layer). `states` and `now_us` (the script's clock, µs), if given,
/// receive those. `leased` (per request: how many leased layers it sent; null: none) says
/// where the lease records are; `grants`, if given, receives them, every request's in order.
/// Returns false on a malformed reply.
bool decode_batch(const redis::reply& r, std::vector<chain_decision>& out,
                  std::vector<decided_state>* states = nullptr, double* now_us = nullptr,
                  const std::vector<std::size_t>* leased = nullptr,
                  std::vector<lease_grant>* grants = nullptr);

/// Whether a decoded decision fits the chain `refs` it answers, with `grants` its leased
/// layers' records (chain order): a refused request names its deciding layer, every position
/// falls in the chain and every rule index in its layer's rules. The gateway indexes its chain
/// with these numbers: a reply that does not fit (a misbehaving server) fails the call.
bool fits_chain(const chain_decision& d, const std::vector<layer_ref>& refs,
                std::span<const lease_grant> grants);

/// fits_chain for every decision of a call: `refs_of(i)` is request i's chain, `leased[i]` its
/// number of lease records in `grants` (decode_batch's).
template <class RefsOf>
bool fits_batch(const std::vector<chain_decision>& decisions, RefsOf&& refs_of,
                const std::vector<std::size_t>& leased, const std::vector<lease_grant>& grants) {
    std::size_t g = 0;
    for (std::size_t i = 0; i < decisions.size(); ++i) {
        if (grants.size() - g < leased[i]) return false;
        if (!fits_chain(decisions[i], refs_of(i), std::span(grants).subspan(g, leased[i])))
            return false;
        g += leased[i];
    }
    return true;
}

}  // namespace rategate::limiters
