// fixed_window: a counter per window, windows aligned to multiples of their width since the
// epoch (SPEC §2). Lua twin: limiters/lua/10_fixed_window.lua.
// Source: the fixed-window counter, as in the "rate limiter" pattern of Redis' INCR
// documentation (INCR + EXPIRE per window).
#include <algorithm>
#include <cmath>

#include "limiters/algorithms/twin.hpp"

namespace rategate::limiters::twin {

namespace {

std::size_t state_size(const rule_params& p) {
    return 2;
}

// Fixed window aligned to multiples of the window since the epoch. State: window start, count.
rule_outcome fixed_window(const rule_params& p, const double* in, double* out, double now,
                          double cost, double /*delay: a window cannot reserve*/) {
    double limit = p[0], window = p[1];
    double current = std::floor(now / window) * window;
    double start = in ? in[0] : current;
    double count = in ? in[1] : 0;
    if (current > start) {
        start = current;
        count = 0;
    }
    double t = std::max(now, start);
    rule_outcome o;
    double next = count;
    if (count + cost <= limit) {
        o.ok = true;
        next = count + cost;
    } else {
        o.retry = start + window - t;
    }
    out[0] = start;
    out[1] = next;
    o.remaining = std::max(0.0, limit - next);
    o.reset = start + window - t;
    o.ttl = (t - now) + (o.reset + 1000);
    return o;
}

}  // namespace

verdict decide_fixed_window(const layer_spec& spec, const layer_state& state, double now,
                            double cost, layer_state& next, double& ttl) {
    return evaluate_rules<state_size, fixed_window>(spec, state, now, cost, next, ttl);
}

}  // namespace rategate::limiters::twin
