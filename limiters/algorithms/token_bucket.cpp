// token_bucket: lazy refill, starts full (SPEC §2). Lua twin: limiters/lua/50_token_bucket.lua.
// Source: the token bucket of RFC 2697 §3 (a bucket of size CBS filled at CIR), refilled on
// demand from the time since the last decision.
#include <algorithm>
#include <cmath>

#include "limiters/algorithms/twin.hpp"

namespace rategate::limiters::twin {

namespace {

std::size_t state_size(const rule_params& p) {
    return 2;
}

// Token bucket with lazy refill, starting full. State: tokens, last.
rule_outcome token_bucket(const rule_params& p, const double* in, double* out, double now,
                          double cost, double delay) {
    double rate = p[0], period = p[1], burst = p[2];
    double tokens = in ? in[0] : burst;
    double last = in ? in[1] : now;
    double t = std::max(now, last);
    tokens = std::min(burst, tokens + (t - last) * rate / period);
    rule_outcome o;
    double left = tokens;
    if (tokens >= cost) {
        o.ok = true;
        left = tokens - cost;
    } else {
        double wait = std::ceil((cost - tokens) * period / rate);
        if (delay > 0 && wait <= delay && cost <= burst) {
            o.ok = o.reserved = true;
            o.wait = wait;
            left = tokens - cost;
        } else {
            o.retry = wait;
        }
    }
    out[0] = left;
    out[1] = t;
    o.remaining = std::max(0.0, std::floor(left));
    o.reset = std::ceil((burst - left) * period / rate);
    o.ttl = (t - now) + (o.reset + 1000);
    return o;
}

}  // namespace

verdict decide_token_bucket(const layer_spec& spec, const layer_state& state, double now,
                            double cost, layer_state& next, double& ttl) {
    return evaluate_rules<state_size, token_bucket>(spec, state, now, cost, next, ttl);
}

}  // namespace rategate::limiters::twin
