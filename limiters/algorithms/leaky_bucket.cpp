// leaky_bucket as a meter: the level drains at `rate` per `period`; admit while level + cost
// <= capacity (SPEC §2). Lua twin: limiters/lua/40_leaky_bucket.lua.
// Source: J. Turner, "New directions in communications", IEEE Communications Magazine 24(10),
// 1986 (the leaky bucket); the meter form is the continuous-state leaky bucket of ITU-T I.371.
#include <algorithm>
#include <cmath>

#include "limiters/algorithms/twin.hpp"

namespace rategate::limiters::twin {

namespace {

std::size_t state_size(const rule_params& p) {
    return 2;
}

// Leaky bucket as a meter: the level drains at `rate` per `period`. State: level, last.
rule_outcome leaky_bucket(const rule_params& p, const double* in, double* out, double now,
                          double cost, double delay) {
    double rate = p[0], period = p[1], capacity = p[2];
    double level = in ? in[0] : 0;
    double last = in ? in[1] : now;
    double t = std::max(now, last);
    level = std::max(0.0, level - (t - last) * rate / period);
    rule_outcome o;
    double next = level;
    if (level + cost <= capacity) {
        o.ok = true;
        next = level + cost;
    } else {
        double wait = std::ceil((level + cost - capacity) * period / rate);
        if (delay > 0 && wait <= delay && cost <= capacity) {
            o.ok = o.reserved = true;
            o.wait = wait;
            next = level + cost;
        } else {
            o.retry = wait;
        }
    }
    out[0] = next;
    out[1] = t;
    o.remaining = std::max(0.0, std::floor(capacity - next));
    o.reset = std::ceil(next * period / rate);
    o.ttl = (t - now) + (o.reset + 1000);
    return o;
}

}  // namespace

verdict decide_leaky_bucket(const layer_spec& spec, const layer_state& state, double now,
                            double cost, layer_state& next, double& ttl) {
    return evaluate_rules<state_size, leaky_bucket>(spec, state, now, cost, next, ttl);
}

}  // namespace rategate::limiters::twin
