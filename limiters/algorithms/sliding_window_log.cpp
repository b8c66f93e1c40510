// sliding_window_log: one entry per admitted request, exact; every rule of the layer reads the
// same log (SPEC §2). Lua twin: limiters/lua/20_sliding_window_log.lua (a ZSET per key).
// Source: the "sliding log" of Figma's "An alternative approach to rate limiting" (2017).
#include <algorithm>
#include <cmath>

#include "limiters/algorithms/twin.hpp"

namespace rategate::limiters::twin {

// Entries newer than t - window count, for each rule.
verdict decide_sliding_window_log(const layer_spec& spec, const layer_state& state, double now,
                                  double cost, layer_state& next, double& ttl) {
    double t = now;
    if (!state.log.empty()) t = std::max(now, state.log.back().at_us);
    double longest = 0;
    for (const auto& r : spec.rules)
        longest = std::max(longest, r[1]);
    verdict_fold fold;
    for (std::size_t i = 0; i < spec.rules.size(); ++i) {
        double limit = spec.rules[i][0], window = spec.rules[i][1];
        double in_window = 0;
        for (const auto& e : state.log)
            if (e.at_us > t - window) in_window = in_window + e.permits;
        bool ok = in_window + cost <= limit;
        double remaining = std::max(0.0, limit - in_window - (ok ? cost : 0));
        double retry = 0;
        if (!ok) {
            retry = window;
            double need = in_window + cost - limit;
            double freed = 0;
            if (cost <= limit) {
                for (const auto& e : state.log) {
                    if (e.at_us <= t - window) continue;
                    freed = freed + e.permits;
                    if (freed >= need) {
                        retry = e.at_us + window - t;
                        break;
                    }
                }
            }
        }
        // The newest entry (this request) leaves the window last: reset is one window.
        fold.add(static_cast<int>(i), ok, retry, remaining, window);
    }
    verdict v = fold.v;
    next.present = true;
    next.log.clear();
    for (const auto& e : state.log)
        if (e.at_us > t - longest) next.log.push_back(e);
    if (v.allowed) next.log.push_back({t, cost});
    ttl = (t - now) + longest + 1000;  // TTLs count from `now`, the time the store sees
    if (!v.allowed && spec.delay_us > 0 && v.retry_us <= spec.delay_us &&
        cost <= spec.rules[v.rule][0])
        v.wait_us = v.retry_us;
    return v;
}

}  // namespace rategate::limiters::twin
