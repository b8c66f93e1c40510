// The refund of a Redis Cluster chain part (limiters/lua/refund/refund.lua): when one per-slot
// part of a request's chain rejects, each part that consumed is undone by one call of the
// refund script (all its keys in one slot). Never lets a limit be exceeded: see the script.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "limiters/local/local_store.hpp"

namespace rategate::limiters {

/// The refund script's source (embedded).
std::string_view refund_script();

/// The refund script for one master of a Redis Cluster: limiters/lua/cluster/
/// cross_slot_refund.lua, then refund_script(). Called with no declared keys and the keys after
/// its one argument, it refunds keys of several slots of that master in one call (Redis 7.0+).
std::string cross_slot_refund_script();

/// The give-back script's source (limiters/lua/give_back/give_back.lua; SPEC §2 `sync`): it
/// takes the refund script's arguments, an item's cost being the permits given back and its
/// consumed_at the earliest grant's time.
std::string_view give_back_script();

/// The give-back script's ARGV[1] for `items` (KEYS: their keys, in order).
std::string encode_give_back_args(const std::vector<lease_return>& items);

/// One key to refund: what its layer consumed, and when.
struct refund_item {
    std::string_view key;  ///< a view: keep the key alive until the call is encoded and sent
    int algorithm;         ///< algorithm_code() of the layer's algorithm
    std::vector<std::array<double, 4>> rules;  ///< the layer's rule_params, as the chain sends them
    double cost;                               ///< permits the request consumed
    double consumed_at_us;  ///< the `now` (limiter clock, µs) the consuming chain call returned
};

/// The refund of `cost` permits consumed at `consumed_at_us` by layer `layer` (its key is
/// viewed, not copied).
refund_item refund_item_of(const layer_ref& layer, double cost, double consumed_at_us);

/// ARGV[1] of the refund script for `items` (KEYS are the items' keys, in the same order):
/// packed native-order doubles, per item: algorithm, rule count, 4 numbers per rule, cost,
/// consumed_at.
std::string encode_refund_args(const std::vector<refund_item>& items);

}  // namespace rategate::limiters
