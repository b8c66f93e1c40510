// evaluate() (one switch: the twins' entries) and what the table answers per layer.
#include "limiters/algorithms/algorithms.hpp"

#include <algorithm>
#include <limits>

#include "limiters/algorithms/twin.hpp"

namespace rategate::limiters {

using config::algorithm;

verdict evaluate(const layer_spec& spec, const layer_state& state, double now, double cost,
                 layer_state& next, double& ttl) {
    // One direct call per layer: each twin's rule loop is compiled with its rule function.
    switch (spec.algo) {
        case algorithm::fixed_window:
            return twin::decide_fixed_window(spec, state, now, cost, next, ttl);
        case algorithm::sliding_window_log:
            return twin::decide_sliding_window_log(spec, state, now, cost, next, ttl);
        case algorithm::sliding_window_counter:
            return twin::decide_sliding_window_counter(spec, state, now, cost, next, ttl);
        case algorithm::leaky_bucket:
            return twin::decide_leaky_bucket(spec, state, now, cost, next, ttl);
        case algorithm::token_bucket:
            return twin::decide_token_bucket(spec, state, now, cost, next, ttl);
        case algorithm::gcra:
            return twin::decide_gcra(spec, state, now, cost, next, ttl);
        case algorithm::smooth_bursty:
            return twin::decide_smooth_bursty(spec, state, now, cost, next, ttl);
        case algorithm::smooth_warming_up:
            return twin::decide_smooth_warming_up(spec, state, now, cost, next, ttl);
    }
    return {};
}

double retry_bound_us(const layer_spec& spec, double cost, double max_cost) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    if (spec.delay_us > 0 && !spec.shadow) return inf;
    const auto& row = algorithm_facts(spec.algo);
    double bound = 0;
    for (const auto& p : spec.rules)
        bound = std::max(bound, row.retry_bound_us(p, cost, max_cost));
    // A few µs for rounding of doubles in the table's formulas.
    return bound + 2;
}

}  // namespace rategate::limiters
