#include "gateway/limiting/limit_check.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <map>

namespace rategate::gateway {

namespace net = boost::asio;
using limiters::chain_decision;
using limiters::wall_clock_us;

namespace {

constexpr std::size_t max_waiting_per_key = 1024;  // shaped requests held per key and event loop

}  // namespace

limit_checker::limit_checker(const config::config& cfg, const limiters::policy& policy,
                             limiters::local_store& local, loop_metrics& metrics,
                             limiters::backend* shared)
    : cfg_(cfg),
      policy_(policy),
      local_(local),
      shared_(shared),
      cache_(cfg.redis ? cfg.redis->over_limit_cache : 0),
      metrics_(metrics) {}

limit_checker::~limit_checker() = default;

bool limit_checker::redis_ready() const {
    return shared_ && shared_->ready();
}

void limit_checker::publish(loop_metrics& m) const {
    m.set_top(top_.snapshot(static_cast<std::int64_t>(wall_clock_us() / 1000)));
    m.cache_entries.store(static_cast<std::int64_t>(cache_.size()), std::memory_order_relaxed);
}

void limit_checker::count(const limit_outcome& o) {
    using lo = limiter_outcome;
    auto add = [&](const limiters::policy::layer* l, lo x) {
        metrics_.limiter_decisions[l->index][static_cast<std::size_t>(x)].add();
    };
    if (o.what == limit_outcome::kind::denied) return add(o.decider, lo::denied);
    if (o.what == limit_outcome::kind::invalid_identity) return;  // no layer decided anything
    bool error = o.what == limit_outcome::kind::unavailable || (o.redis_failed && !o.used_local);
    for (std::size_t i = 0; i < o.layers.size(); ++i) {
        const auto* l = o.layers[i];
        if (error)
            add(l, lo::error);
        else if (l->spec.shadow)
            add(l, (o.decision.shadow_mask >> i) & 1u ? lo::shadow_limited : lo::allowed);
        else if (o.what == limit_outcome::kind::limited) {
            if (l == o.decider) add(l, lo::limited);
        } else
            add(l, o.decision.wait_us > 0 && l->spec.delay_us > 0 ? lo::delayed : lo::allowed);
    }
}

net::awaitable<limit_outcome> limit_checker::check(std::size_t route_index,
                                                   const limiters::identity& who, double cost) {
    auto out = co_await decide(route_index, who, cost);
    count(out);
    co_return out;
}

net::awaitable<limit_outcome> limit_checker::decide(std::size_t route_index,
                                                    const limiters::identity& who, double cost) {
    const auto& route = cfg_.routes[route_index];
    limiters::policy::request_keys keys;
    policy_.keys_for(route_index, who, keys);
    limit_outcome out;
    if (keys.denied_by) {
        out.what = limit_outcome::kind::denied;
        out.decider = keys.denied_by;
        co_return out;
    }
    if (keys.invalid_by) {
        out.what = limit_outcome::kind::invalid_identity;
        out.decider = keys.invalid_by;
        co_return out;
    }
    if (keys.refs.empty()) co_return out;
    out.layers = std::move(keys.layers);  // the chain as decided, kept in the outcome

    // Shaping: requests held for a delayed layer are bounded per key and event loop.
    double max_delay = 0;
    for (const auto* l : out.layers)
        max_delay = std::max(max_delay, l->spec.shadow ? 0 : l->spec.delay_us);
    std::vector<std::string> held;
    if (max_delay > 0) {
        for (std::size_t i = 0; i < out.layers.size(); ++i)
            if (out.layers[i]->spec.delay_us > 0) {
                // find(), not operator[]: a lookup must not leave an entry behind when a later
                // delay layer of the chain refuses the request.
                auto held_now = waiting_.find(keys.refs[i].key);
                if (held_now != waiting_.end() && held_now->second >= max_waiting_per_key) {
                    out.what = limit_outcome::kind::limited;
                    out.decider = out.header = out.layers[i];
                    out.decision.allowed = false;
                    out.decision.retry_us = out.layers[i]->spec.delay_us;
                    co_return out;
                }
                held.push_back(keys.refs[i].key);
            }
    }
    struct hold_guard {
        std::map<std::string, std::size_t>& waiting;
        const std::vector<std::string>& keys;
        hold_guard(std::map<std::string, std::size_t>& w, const std::vector<std::string>& k)
            : waiting(w), keys(k) {
            for (const auto& key : keys)
                ++waiting[key];
        }
        ~hold_guard() {
            for (const auto& key : keys)
                if (--waiting[key] == 0) waiting.erase(key);
        }
    } hold(waiting_, held);

    // The exact over-limit cache (limiters/local/over_limit_cache.hpp): a rejection it can
    // prove is answered here, the way Redis would answer it, while Redis is reachable.
    bool cacheable = shared_ && cache_.capacity() > 0 && max_delay == 0 &&
                     limiters::over_limit_cache::eligible(out.layers);
    if (cacheable && redis_ready()) {
        // After a reconnect (Redis restarted, failed over) its state may differ from what the
        // cache learned: start over.
        if (auto epoch = shared_->epoch(); epoch != cache_epoch_) {
            cache_.clear();
            cache_epoch_ = epoch;
        }
        if (auto hit = cache_.lookup(out.layers, keys.refs, wall_clock_us(), cost)) {
            auto at = static_cast<std::size_t>(hit->decider);
            out.what = limit_outcome::kind::limited;
            out.decision = *hit;
            out.decider = out.header = out.layers[at];
            metrics_.limiter_cache_hits[out.decider->index].add();
            top_.add(keys.refs[at].key, static_cast<std::int64_t>(wall_clock_us() / 1000));
            co_return out;
        }
    }

    double waited = 0;
    for (;;) {
        chain_decision d;
        bool decided = false;
        if (shared_ &&
            !(route.on_redis_error == config::redis_error_policy::local && !redis_ready())) {
            auto a = co_await shared_->decide(keys.refs, cost, clock_, cacheable);
            if (!a.ec) {
                d = a.decision;
                decided = true;
                if (cacheable) cache_.learn(out.layers, keys.refs, d, a.state, a.clock_offset_us);
            } else {
                out.redis_failed = true;
                if (route.on_redis_error == config::redis_error_policy::allow) {
                    co_return out;  // fail open: pass, no headers
                }
                if (route.on_redis_error == config::redis_error_policy::deny) {
                    out.what = limit_outcome::kind::unavailable;
                    co_return out;
                }
            }
        }
        if (!decided) {
            if (shared_) {
                out.used_local = true;
                out.redis_failed = true;
            }
            d = local_.decide_now(keys.refs, cost, clock_.now_us());
        }
        out.decision = d;
        out.header =
            d.header_layer >= 0 ? out.layers[static_cast<std::size_t>(d.header_layer)] : nullptr;
        if (d.allowed) {
            if (d.wait_us > 0) {
                net::steady_timer t(
                    co_await net::this_coro::executor,
                    std::chrono::microseconds(static_cast<std::int64_t>(d.wait_us)));
                co_await t.async_wait(net::as_tuple(net::use_awaitable));
            }
            co_return out;
        }
        // A window layer in delay mode says when to decide again; it reserves nothing.
        if (d.wait_us > 0 && waited + d.wait_us <= max_delay) {
            waited += d.wait_us;
            net::steady_timer t(
                co_await net::this_coro::executor,
                std::chrono::microseconds(static_cast<std::int64_t>(d.wait_us) + 1));
            co_await t.async_wait(net::as_tuple(net::use_awaitable));
            continue;
        }
        out.what = limit_outcome::kind::limited;
        out.decider = out.layers[static_cast<std::size_t>(d.decider)];
        top_.add(keys.refs[static_cast<std::size_t>(d.decider)].key,
                 static_cast<std::int64_t>(wall_clock_us() / 1000));
        co_return out;
    }
}

}  // namespace rategate::gateway
