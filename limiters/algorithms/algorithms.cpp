#include "limiters/algorithms/algorithms.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "limiters/algorithms/twin.hpp"

namespace rategate::limiters {

using config::algorithm;

int algorithm_code(algorithm a) {
    switch (a) {
        case algorithm::fixed_window:
            return 1;
        case algorithm::sliding_window_log:
            return 2;
        case algorithm::sliding_window_counter:
            return 3;
        case algorithm::leaky_bucket:
            return 4;
        case algorithm::token_bucket:
            return 5;
        case algorithm::gcra:
            return 6;
        case algorithm::smooth_bursty:
            return 7;
        case algorithm::smooth_warming_up:
            return 8;
    }
    return 0;
}

rule_params to_params(algorithm a, const config::rule_config& r) {
    auto us = [](config::micros d) { return static_cast<double>(d.count()); };
    switch (a) {
        case algorithm::fixed_window:
        case algorithm::sliding_window_log:
            return {double(r.limit), us(r.window), 0, 0};
        case algorithm::sliding_window_counter:
            return {double(r.limit), us(r.window), double(r.buckets), 0};
        case algorithm::leaky_bucket:
            return {r.rate, us(r.period), r.capacity, 0};
        case algorithm::token_bucket:
        case algorithm::gcra:
            return {r.rate, us(r.period), r.burst, 0};
        case algorithm::smooth_bursty:
            return {r.rate, r.max_burst_seconds, us(r.idle_ttl), 0};
        case algorithm::smooth_warming_up:
            return {r.rate, us(r.warmup_period), r.cold_factor, 0};
    }
    return {};
}

bool layer_spec::reservable() const {
    return algo == algorithm::token_bucket || algo == algorithm::gcra ||
           algo == algorithm::leaky_bucket || algo == algorithm::smooth_bursty ||
           algo == algorithm::smooth_warming_up;
}

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
    double bound = 0;
    for (const auto& p : spec.rules) {
        double b = inf;
        switch (spec.algo) {
            case algorithm::fixed_window:            // start + window - t, t >= start
            case algorithm::sliding_window_log:      // entry + window - t, entry <= t
            case algorithm::sliding_window_counter:  // (j + n) * width - t, j <= k, t >= k * width
                b = p[1];
                break;
            case algorithm::token_bucket:  // tokens >= 0: ceil((cost - tokens) * period / rate)
            case algorithm::leaky_bucket:  // level <= capacity: ceil((level + cost - cap) * ...)
                b = std::ceil(cost * p[1] / p[0]);
                break;
            case algorithm::gcra:  // tat <= t + burst * interval: ceil(allow_at - t)
                b = std::ceil(cost * (p[1] / p[0]));
                break;
            case algorithm::smooth_bursty:  // next_free <= admitted + floor(max_cost * stable)
                b = std::ceil(std::max(cost, max_cost) * (1e6 / p[0]));
                break;
            case algorithm::smooth_warming_up:
                b = inf;
                break;
        }
        bound = std::max(bound, b);
    }
    // A few µs for rounding of doubles in the formulas above.
    return bound + 2;
}

}  // namespace rategate::limiters
