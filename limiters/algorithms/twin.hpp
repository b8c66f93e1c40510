// The frame shared by the C++ twins (internal to limiters/algorithms/): the outcome of one rule,
// the fold of a layer's rules into its verdict, and the loop that runs one algorithm's rule
// function over every rule of a layer. Each algorithm file defines its rule function and its
// decide_<algorithm>() entry, which evaluate() (algorithms.cpp) calls.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>

#include "limiters/algorithms/algorithms.hpp"

namespace rategate::limiters::twin {

// The outcome of one rule. Every rule function has a line-for-line twin in
// limiters/lua/NN_<algorithm>.lua; change both together.
struct rule_outcome {
    bool ok = false;
    bool reserved = false;
    double wait = 0;  // reserved wait
    double retry = 0;
    double remaining = 0;
    double reset = 0;
    double ttl = 0;
};

// Folds each rule's outcome into the layer's verdict: the layer admits only if every rule
// does; its headers follow the rejecting rule with the longest retry, else the rule with the
// fewest permits left (first on ties). Twin: fold() in limiters/lua/00_prelude.lua.
struct verdict_fold {
    verdict v{.allowed = true};
    double best_remaining = std::numeric_limits<double>::infinity();
    double worst_retry = -1;
    void add(int rule, bool ok, double retry, double remaining, double reset) {
        if (!ok) {
            v.allowed = false;
            if (retry > worst_retry) {
                worst_retry = retry;
                v.retry_us = retry;
                v.rule = rule;
                v.remaining = remaining;
                v.reset_us = reset;
            }
        } else if (worst_retry < 0 && remaining < best_remaining) {
            best_remaining = remaining;
            v.rule = rule;
            v.remaining = remaining;
            v.reset_us = reset;
        }
    }
};

/// A rule function: decides one rule on its slice of the state. `in` is nullptr for a new key;
/// `out` receives the state to store if the request is admitted; `delay` is the layer's (µs,
/// 0 = none, and 0 for a shadow layer).
using rule_fn = rule_outcome (*)(const rule_params& p, const double* in, double* out, double now,
                                 double cost, double delay);
/// How many numbers one rule stores.
using state_size_fn = std::size_t (*)(const rule_params& p);

/// Decides a layer whose state is numbers (every algorithm but the log): runs `Decide` over
/// each rule, on its slice of the state (`StateSize` numbers), and folds. Both are template
/// arguments, so that each algorithm's loop is compiled with its rule function inlined.
template <state_size_fn StateSize, rule_fn Decide>
verdict evaluate_rules(const layer_spec& spec, const layer_state& state, double now, double cost,
                       layer_state& next, double& ttl) {
    std::size_t total = 0;
    for (const auto& r : spec.rules)
        total += StateSize(r);
    next.present = true;
    next.values.assign(total, 0);
    bool have = state.present && state.values.size() == total;
    double delay = spec.shadow ? 0 : spec.delay_us;
    verdict_fold fold;
    ttl = 0;
    std::size_t offset = 0;
    for (std::size_t i = 0; i < spec.rules.size(); ++i) {
        const auto& p = spec.rules[i];
        const double* in = have ? state.values.data() + offset : nullptr;
        double* out = next.values.data() + offset;
        offset += StateSize(p);
        rule_outcome o = Decide(p, in, out, now, cost, delay);
        ttl = std::max(ttl, o.ttl);
        if (o.ok && o.reserved) {
            fold.v.reserved = true;
            fold.v.wait_us = std::max(fold.v.wait_us, o.wait);
        }
        fold.add(static_cast<int>(i), o.ok, o.retry, o.remaining, o.reset);
    }
    verdict v = fold.v;
    if (!v.allowed) {
        v.reserved = false;
        // Window algorithms cannot reserve: in delay mode they say when to decide again.
        v.wait_us = (delay > 0 && v.retry_us <= delay) ? v.retry_us : 0;
    }
    return v;
}

/// The twins' entries, one per algorithm file: decide one request of `cost` at `now` (µs) for
/// one layer, as evaluate() in algorithms.hpp.
verdict decide_fixed_window(const layer_spec& spec, const layer_state& state, double now,
                            double cost, layer_state& next, double& ttl);
verdict decide_sliding_window_log(const layer_spec& spec, const layer_state& state, double now,
                                  double cost, layer_state& next, double& ttl);
verdict decide_sliding_window_counter(const layer_spec& spec, const layer_state& state, double now,
                                      double cost, layer_state& next, double& ttl);
verdict decide_leaky_bucket(const layer_spec& spec, const layer_state& state, double now,
                            double cost, layer_state& next, double& ttl);
verdict decide_token_bucket(const layer_spec& spec, const layer_state& state, double now,
                            double cost, layer_state& next, double& ttl);
verdict decide_gcra(const layer_spec& spec, const layer_state& state, double now, double cost,
                    layer_state& next, double& ttl);
verdict decide_smooth_bursty(const layer_spec& spec, const layer_state& state, double now,
                             double cost, layer_state& next, double& ttl);
verdict decide_smooth_warming_up(const layer_spec& spec, const layer_state& state, double now,
                                 double cost, layer_state& next, double& ttl);

}  // namespace rategate::limiters::twin
