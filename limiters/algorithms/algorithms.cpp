#include "limiters/algorithms/algorithms.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rategate::limiters {

using config::algorithm;

int algorithm_code(algorithm a) {
    switch (a) {
        case algorithm::fixed_window:
            return 1;
        case algorithm::sliding_window_log:
            return 2;
        case algorithm::sliding_window_counter:
            return 3;
        case algorithm::leaky_bucket:
            return 4;
        case algorithm::token_bucket:
            return 5;
        case algorithm::gcra:
            return 6;
        case algorithm::smooth_bursty:
            return 7;
        case algorithm::smooth_warming_up:
            return 8;
    }
    return 0;
}

rule_params to_params(algorithm a, const config::rule_config& r) {
    auto us = [](config::micros d) { return static_cast<double>(d.count()); };
    switch (a) {
        case algorithm::fixed_window:
        case algorithm::sliding_window_log:
            return {double(r.limit), us(r.window), 0, 0};
        case algorithm::sliding_window_counter:
            return {double(r.limit), us(r.window), double(r.buckets), 0};
        case algorithm::leaky_bucket:
            return {r.rate, us(r.period), r.capacity, 0};
        case algorithm::token_bucket:
        case algorithm::gcra:
            return {r.rate, us(r.period), r.burst, 0};
        case algorithm::smooth_bursty:
            return {r.rate, r.max_burst_seconds, us(r.idle_ttl), 0};
        case algorithm::smooth_warming_up:
            return {r.rate, us(r.warmup_period), r.cold_factor, 0};
    }
    return {};
}

bool layer_spec::reservable() const {
    return algo == algorithm::token_bucket || algo == algorithm::gcra ||
           algo == algorithm::leaky_bucket || algo == algorithm::smooth_bursty ||
           algo == algorithm::smooth_warming_up;
}

namespace {

// The outcome of one rule. Every formula below has a line-for-line twin in
// limiters/lua/algorithms/*.lua; change both together.
struct rule_outcome {
    bool ok = false;
    bool reserved = false;
    double wait = 0;  // reserved wait
    double retry = 0;
    double remaining = 0;
    double reset = 0;
    double ttl = 0;
};

std::size_t state_size(algorithm a, const rule_params& p) {
    switch (a) {
        case algorithm::sliding_window_counter:
            return 1 + static_cast<std::size_t>(p[2]);
        case algorithm::smooth_bursty:
        case algorithm::smooth_warming_up:
            return 3;
        case algorithm::sliding_window_log:
            return 0;
        default:
            return 2;
    }
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

// Fixed window aligned to multiples of the window since the epoch. State: window start, count.
rule_outcome fixed_window(const rule_params& p, const double* in, double* out, double now,
                          double cost) {
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

// Sliding window counter: ring of `buckets` sub-window counters aligned to multiples of
// window/buckets; the window is the sum of the most recent ones, the current included.
// State: index of the newest sub-window, then one count per ring slot.
rule_outcome sliding_window_counter(const rule_params& p, const double* in, double* out, double now,
                                    double cost) {
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

// Guava SmoothRateLimiter: tryAcquire(cost, timeout = delay) at time t — canAcquire, then
// resync and reserveEarliestAvailable. `stored_wait(stored, spend)` is the subclass's
// storedPermitsToWaitTime (0 for SmoothBursty). Updates stored and next_free in place.
template <class StoredWait>
rule_outcome guava_acquire(double& stored, double& next_free, double t, double cost, double delay,
                           double max_permits, double cool_down, double stable,
                           StoredWait stored_wait) {
    rule_outcome o;
    if (next_free - delay > t) {
        o.retry = std::ceil(next_free - t);
        return o;
    }
    if (t > next_free) {
        stored = std::min(max_permits, stored + (t - next_free) / cool_down);
        next_free = t;
    }
    double moment = next_free;
    double spend = std::min(cost, stored);
    double fresh = cost - spend;
    next_free = next_free + (stored_wait(stored, spend) + std::floor(fresh * stable));
    stored = stored - spend;
    o.ok = true;
    o.wait = std::max(moment - t, 0.0);
    o.reserved = o.wait > 0;
    return o;
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

// Sliding window log over every rule at once: entries newer than t - window count.
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

verdict sliding_window_log(const layer_spec& spec, const layer_state& state, double now,
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

}  // namespace

verdict evaluate(const layer_spec& spec, const layer_state& state, double now, double cost,
                 layer_state& next, double& ttl) {
    if (spec.algo == algorithm::sliding_window_log)
        return sliding_window_log(spec, state, now, cost, next, ttl);
    std::size_t total = 0;
    for (const auto& r : spec.rules)
        total += state_size(spec.algo, r);
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
        offset += state_size(spec.algo, p);
        rule_outcome o;
        switch (spec.algo) {
            case algorithm::fixed_window:
                o = fixed_window(p, in, out, now, cost);
                break;
            case algorithm::sliding_window_counter:
                o = sliding_window_counter(p, in, out, now, cost);
                break;
            case algorithm::leaky_bucket:
                o = leaky_bucket(p, in, out, now, cost, delay);
                break;
            case algorithm::token_bucket:
                o = token_bucket(p, in, out, now, cost, delay);
                break;
            case algorithm::gcra:
                o = gcra(p, in, out, now, cost, delay);
                break;
            case algorithm::smooth_bursty:
                o = smooth_bursty(p, in, out, now, cost, delay);
                break;
            case algorithm::smooth_warming_up:
                o = smooth_warming_up(p, in, out, now, cost, delay);
                break;
            case algorithm::sliding_window_log:
                break;
        }
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

double retry_bound_us(const layer_spec& spec, double cost, double max_cost) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    if (spec.delay_us > 0 && !spec.shadow) return inf;
    double bound = 0;
    for (const auto& p : spec.rules) {
        double b = inf;
        switch (spec.algo) {
            case algorithm::fixed_window:            // start + window - t, t >= start
            case algorithm::sliding_window_log:      // entry + window - t, entry <= t
            case algorithm::sliding_window_counter:  // (j + n) * width - t, j <= k, t >= k * width
                b = p[1];
                break;
            case algorithm::token_bucket:  // tokens >= 0: ceil((cost - tokens) * period / rate)
            case algorithm::leaky_bucket:  // level <= capacity: ceil((level + cost - cap) * ...)
                b = std::ceil(cost * p[1] / p[0]);
                break;
            case algorithm::gcra:  // tat <= t + burst * interval: ceil(allow_at - t)
                b = std::ceil(cost * (p[1] / p[0]));
                break;
            case algorithm::smooth_bursty:  // next_free <= admitted + floor(max_cost * stable)
                b = std::ceil(std::max(cost, max_cost) * (1e6 / p[0]));
                break;
            case algorithm::smooth_warming_up:
                b = inf;
                break;
        }
        bound = std::max(bound, b);
    }
    // A few µs for rounding of doubles in the formulas above.
    return bound + 2;
}

}  // namespace rategate::limiters
