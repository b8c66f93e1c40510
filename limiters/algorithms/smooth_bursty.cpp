// smooth_bursty: Guava's SmoothBursty, decided as tryAcquire(cost, 0) (or the layer's delay as
// the timeout); a key idle for idle_ttl past its next free ticket is a fresh limiter (SPEC §2).
// Lua twins: limiters/lua/70_smooth_bursty.lua and 65_guava.lua (guava.hpp here).
// Source: com.google.common.util.concurrent.SmoothRateLimiter.SmoothBursty (Guava).
#include <algorithm>
#include <cmath>

#include "limiters/algorithms/guava.hpp"
#include "limiters/algorithms/twin.hpp"

namespace rategate::limiters::twin {

namespace {

std::size_t state_size(const rule_params& p) {
    return 3;
}

// Guava SmoothBursty. State: stored permits, next free ticket (µs), last time seen. A key idle
// for idle_ttl past its next free ticket is a fresh limiter (no stored permits).
rule_outcome smooth_bursty(const rule_params& p, const double* in, double* out, double now,
                           double cost, double delay) {
    double rate = p[0], max_burst_seconds = p[1], idle_ttl = p[2];
    double interval = 1e6 / rate;
    double max_permits = max_burst_seconds * rate;
    double stored = 0, next_free = now, last = now;
    if (in && now - in[1] < idle_ttl) {
        stored = in[0];
        next_free = in[1];
        last = in[2];
    }
    double t = std::max(now, last);
    auto o = guava_acquire(stored, next_free, t, cost, delay, max_permits, interval, interval,
                           [](double, double) { return 0.0; });
    out[0] = stored;
    out[1] = next_free;
    out[2] = t;
    o.remaining = next_free > t ? 0 : std::floor(stored) + 1;
    o.reset = std::max(next_free - t, 0.0) + std::ceil((max_permits - stored) * interval);
    o.ttl = (t - now) + (std::max(next_free - t, 0.0) + idle_ttl);
    return o;
}

}  // namespace

verdict decide_smooth_bursty(const layer_spec& spec, const layer_state& state, double now,
                             double cost, layer_state& next, double& ttl) {
    return evaluate_rules<state_size, smooth_bursty>(spec, state, now, cost, next, ttl);
}

}  // namespace rategate::limiters::twin
