// gcra: the generic cell rate algorithm, virtual-scheduling form (a theoretical arrival time);
// `burst` requests may pass at once, as for token_bucket (SPEC §2).
// Lua twin: limiters/lua/60_gcra.lua.
// Source: ITU-T Recommendation I.371 (GCRA), as popularised for HTTP by redis-cell.
#include <algorithm>
#include <cmath>

#include "limiters/algorithms/twin.hpp"

namespace rategate::limiters::twin {

namespace {

std::size_t state_size(const rule_params& p) {
    return 2;
}

// Generic cell rate algorithm (theoretical arrival time). State: tat, last.
rule_outcome gcra(const rule_params& p, const double* in, double* out, double now, double cost,
                  double delay) {
    double rate = p[0], period = p[1], burst = p[2];
    double interval = period / rate;
    double tat = in ? in[0] : now;
    double last = in ? in[1] : now;
    double t = std::max(now, last);
    double base = std::max(tat, t);
    double new_tat = base + cost * interval;
    double allow_at = new_tat - burst * interval;
    rule_outcome o;
    double kept = base;
    if (allow_at <= t) {
        o.ok = true;
        kept = new_tat;
    } else {
        double wait = std::ceil(allow_at - t);
        if (delay > 0 && wait <= delay && cost <= burst) {
            o.ok = o.reserved = true;
            o.wait = wait;
            kept = new_tat;
        } else {
            o.retry = wait;
        }
    }
    out[0] = kept;
    out[1] = t;
    o.remaining = std::max(0.0, std::floor((burst * interval - (kept - t)) / interval));
    o.reset = std::ceil(kept - t);
    o.ttl = (t - now) + (o.reset + 1000);
    return o;
}

}  // namespace

verdict decide_gcra(const layer_spec& spec, const layer_state& state, double now, double cost,
                    layer_state& next, double& ttl) {
    return evaluate_rules<state_size, gcra>(spec, state, now, cost, next, ttl);
}

}  // namespace rategate::limiters::twin
