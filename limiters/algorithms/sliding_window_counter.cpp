// sliding_window_counter: a ring of `buckets` sub-window counters; the window is the sum of the
// most recent ones, the current one included, with no interpolation (SPEC §2).
// Lua twin: limiters/lua/30_sliding_window_counter.lua.
// Source: the "sliding window counters" of Figma's "An alternative approach to rate limiting"
// (2017), without Cloudflare's interpolation of the previous window.
#include <algorithm>
#include <cmath>

#include "limiters/algorithms/twin.hpp"

namespace rategate::limiters::twin {

namespace {

std::size_t state_size(const rule_params& p) {
    return 1 + static_cast<std::size_t>(p[2]);
}

// Sliding window counter: ring of `buckets` sub-window counters aligned to multiples of
// window/buckets; the window is the sum of the most recent ones, the current included.
// State: index of the newest sub-window, then one count per ring slot.
rule_outcome sliding_window_counter(const rule_params& p, const double* in, double* out, double now,
                                    double cost, double /*delay: a window cannot reserve*/) {
    double limit = p[0], window = p[1];
    int n = static_cast<int>(p[2]);
    double width = window / n;
    // Ring slot of sub-window j, as Lua's j % n (never negative).
    auto slot = [&](double j) { return 1 + static_cast<int>(j - std::floor(j / n) * n); };
    double k = std::floor(now / width);
    double newest = in ? in[0] : k;
    for (int i = 0; i < n; ++i)
        out[1 + i] = in ? in[1 + i] : 0;
    if (k < newest) k = newest;
    if (k > newest) {
        double first = std::max(newest + 1, k - n + 1);
        for (double j = first; j <= k; j += 1)
            out[slot(j)] = 0;
    }
    out[0] = k;
    double sum = 0;
    for (int i = 0; i < n; ++i)
        sum = sum + out[1 + i];
    double t = std::max(now, k * width);
    rule_outcome o;
    if (sum + cost <= limit) {
        o.ok = true;
        out[slot(k)] = out[slot(k)] + cost;
        sum = sum + cost;
    } else {
        o.retry = window;
        double freed = 0;
        for (double j = k - n + 1; j <= k; j += 1) {
            freed = freed + out[slot(j)];
            if (sum - freed + cost <= limit) {
                o.retry = (j + n) * width - t;
                break;
            }
        }
    }
    o.remaining = std::max(0.0, limit - sum);
    o.reset = 0;
    for (double j = k; j > k - n; j -= 1) {
        if (out[slot(j)] > 0) {
            o.reset = (j + n) * width - t;
            break;
        }
    }
    o.ttl = (t - now) + ((k + n + 1) * width - t);
    return o;
}

}  // namespace

verdict decide_sliding_window_counter(const layer_spec& spec, const layer_state& state, double now,
                                      double cost, layer_state& next, double& ttl) {
    return evaluate_rules<state_size, sliding_window_counter>(spec, state, now, cost, next, ttl);
}

}  // namespace rategate::limiters::twin
