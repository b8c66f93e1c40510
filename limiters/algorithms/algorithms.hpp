// The eight rate-limit algorithms of SPEC §2, in-process (sans-I/O). Each has a Lua twin under
// limiters/lua/algorithms/ doing the same double arithmetic in the same order, so that both
// give identical decisions for the same trace and clock (tests/redis/test_parity.cpp).
//
// Units: time in microseconds (as doubles holding integers), permits as doubles.
// State: a flat vector of doubles per layer (all rules concatenated); sliding_window_log keeps
// a log of (time µs, permits) entries instead, like its Redis ZSET.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace rategate::limiters {

/// An algorithm's rule as four numbers, in the order the Lua script receives them:
///   fixed_window, sliding_window_log:  limit, window µs
///   sliding_window_counter:            limit, window µs, buckets
///   leaky_bucket:                      rate, period µs, capacity
///   token_bucket, gcra:                rate, period µs, burst
///   smooth_bursty:                     rate /s, max_burst_seconds, idle_ttl µs
///   smooth_warming_up:                 rate /s, warmup_period µs, cold_factor
using rule_params = std::array<double, 4>;

/// Numeric algorithm codes shared with the Lua chain script.
int algorithm_code(config::algorithm a);
rule_params to_params(config::algorithm a, const config::rule_config& r);

/// A layer as the evaluator sees it: algorithm, rules, shadow flag and delay (µs, 0 = none).
struct layer_spec {
    config::algorithm algo = config::algorithm::token_bucket;
    std::vector<rule_params> rules;
    bool shadow = false;
    double delay_us = 0;
    /// True for algorithms that admit a request with a reservation (debt) in delay mode.
    bool reservable() const;
};

/// How one layer judged one request.
struct verdict {
    bool allowed = false;   ///< conforms now, or (reserved) after `wait_us`
    bool reserved = false;  ///< admitted in delay mode; the request must wait `wait_us`
    double wait_us = 0;     ///< delay mode: reserved wait, or (not allowed) when to decide again
    double retry_us = 0;    ///< not allowed: µs until a request of this cost could conform
    double remaining = 0;   ///< permits left after this request, most restrictive rule
    double reset_us = 0;    ///< µs until that rule's quota is fully available again
    int rule = 0;           ///< index of that rule
};

/// One entry of a sliding_window_log: `permits` admitted at `at_us`.
struct log_entry {
    double at_us;
    double permits;
};

/// A layer's stored state: `values` for every algorithm but the log, `log` for the log.
struct layer_state {
    bool present = false;
    std::vector<double> values;
    std::vector<log_entry> log;  ///< sorted by time
};

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
