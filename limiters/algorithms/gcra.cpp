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

// Generic cell rate algorithm (theoretical arrival time). State: the TAT relative to the last
// write (µs, tat - last), last (µs). Relative, because an absolute TAT near 1.7e15 µs holds
// only quarters of a µs: rounding each emission interval to that grid admitted more than the
// rate (every request at 1e7/s). Every time below is relative to t, small and exact.
rule_outcome gcra(const rule_params& p, const double* in, double* out, double now, double cost,
                  double delay) {
    double rate = p[0], period = p[1], burst = p[2];
    double interval = period / rate;
    double ahead = in ? in[0] : 0;
    double last = in ? in[1] : now;
    double t = std::max(now, last);
    double base = ahead - (t - last);  // max(tat, t) - t
    if (!(base > 0)) base = 0;
    double new_tat = base + cost * interval;       // new TAT - t
    double allow_at = new_tat - burst * interval;  // when the request conforms, - t
    rule_outcome o;
    double kept = base;
    if (allow_at <= 0) {
        o.ok = true;
        kept = new_tat;
    } else {
        double wait = std::ceil(allow_at);
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
    o.remaining = std::max(0.0, std::floor((burst * interval - kept) / interval));
    o.reset = std::ceil(kept);
    o.ttl = (t - now) + (o.reset + 1000);
    return o;
}

}  // namespace

verdict decide_gcra(const layer_spec& spec, const layer_state& state, double now, double cost,
                    layer_state& next, double& ttl) {
    return evaluate_rules<state_size, gcra>(spec, state, now, cost, next, ttl);
}

}  // namespace rategate::limiters::twin
