// The types every C++ twin shares: a rule's parameters, a layer as the evaluator sees it, one
// layer's verdict on one request and a layer's stored state.
//
// Units: time in microseconds (as doubles holding integers), permits as doubles.
// State: a flat vector of doubles per layer (all rules concatenated); sliding_window_log keeps
// a log of (time µs, permits) entries instead, like its Redis ZSET.
#pragma once

#include <array>
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

}  // namespace rategate::limiters
