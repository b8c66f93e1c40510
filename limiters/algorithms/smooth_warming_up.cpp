// smooth_warming_up: Guava's SmoothWarmingUp, same decision rule as smooth_bursty; a new key
// starts cold (SPEC §2). Lua twins: limiters/lua/80_smooth_warming_up.lua and 65_guava.lua
// (guava.hpp here).
// Source: com.google.common.util.concurrent.SmoothRateLimiter.SmoothWarmingUp (Guava).
#include <algorithm>
#include <cmath>

#include "limiters/algorithms/guava.hpp"
#include "limiters/algorithms/twin.hpp"

namespace rategate::limiters::twin {

namespace {

std::size_t state_size(const rule_params& p) {
    return 3;
}

// Guava SmoothWarmingUp; a new key starts cold. State as smooth_bursty.
rule_outcome smooth_warming_up(const rule_params& p, const double* in, double* out, double now,
                               double cost, double delay) {
    double rate = p[0], warmup = p[1], cold_factor = p[2];
    double stable = 1e6 / rate;
    double cold = stable * cold_factor;
    double threshold = 0.5 * warmup / stable;
    double max_permits = threshold + 2.0 * warmup / (stable + cold);
    double slope = (cold - stable) / (max_permits - threshold);
    double cool_down = warmup / max_permits;
    double stored = in ? in[0] : max_permits;
    double next_free = in ? in[1] : now;
    double last = in ? in[2] : now;
    double t = std::max(now, last);
    // storedPermitsToWaitTime: the trapezoid above the threshold, then the stable interval.
    auto stored_wait = [&](double stored_now, double take) {
        double above = stored_now - threshold;
        double micros = 0;
        if (above > 0) {
            double above_take = std::min(above, take);
            double length = (stable + above * slope) + (stable + (above - above_take) * slope);
            micros = std::floor(above_take * length / 2.0);
            take = take - above_take;
        }
        return micros + std::floor(stable * take);
    };
    auto o = guava_acquire(stored, next_free, t, cost, delay, max_permits, cool_down, stable,
                           stored_wait);
    out[0] = stored;
    out[1] = next_free;
    out[2] = t;
    o.remaining = next_free > t ? 0 : std::floor(stored) + 1;
    o.reset = std::max(next_free - t, 0.0) + std::ceil((max_permits - stored) * cool_down);
    o.ttl = (t - now) + (o.reset + 1000);
    return o;
}

}  // namespace

verdict decide_smooth_warming_up(const layer_spec& spec, const layer_state& state, double now,
                                 double cost, layer_state& next, double& ttl) {
    return evaluate_rules<state_size, smooth_warming_up>(spec, state, now, cost, next, ttl);
}

}  // namespace rategate::limiters::twin
