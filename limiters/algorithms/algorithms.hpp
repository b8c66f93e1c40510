// The eight rate-limit algorithms of SPEC §2, in-process (sans-I/O): one file per algorithm in
// this folder, each with a Lua twin under limiters/lua/ doing the same double arithmetic in the
// same order, so that both give identical decisions for the same trace and clock
// (tests/redis/test_parity.cpp). The shared types are in layer.hpp.
#pragma once

#include <cstdint>
#include <utility>

#include "limiters/algorithms/layer.hpp"

namespace rategate::limiters {

/// Numeric algorithm codes shared with the Lua chain script.
int algorithm_code(config::algorithm a);
rule_params to_params(config::algorithm a, const config::rule_config& r);

/// Decides one request of `cost` permits at `now_us` for one layer. `state` is read, and the
/// state to store if the request is admitted is written to `next`. Returns the verdict and
/// the TTL (µs) the stored state needs (never shorter than the time after which it equals a
/// new key, smooth_bursty's idle_ttl aside).
verdict evaluate(const layer_spec& spec, const layer_state& state, double now_us, double cost,
                 layer_state& next, double& ttl_us);

/// An upper bound (µs, an integer) on the retry a layer without delay can give a request of
/// `cost`, whatever its state: one window for the window algorithms; the time to earn `cost`
/// permits for token_bucket, leaky_bucket and gcra (without delay their state never holds a
/// debt); for smooth_bursty the time to earn `max_cost` permits (the debt the largest admitted
/// request of any route can leave). +inf where no bound is proven: smooth_warming_up, and any
/// layer in delay mode. Used by the over-limit cache to know that another layer of a chain can
/// never out-wait the cached one.
double retry_bound_us(const layer_spec& spec, double cost, double max_cost);

}  // namespace rategate::limiters
