#include "gateway/limit_check.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>

#include "limiters/local/over_limit_cache.hpp"
#include "limiters/redis/connection.hpp"
#include "limiters/redis_chain.hpp"

namespace rategate::gateway {

namespace net = boost::asio;
using limiters::chain_decision;

namespace {

constexpr std::size_t max_batch = 64;              // decisions per EVALSHA
constexpr std::size_t max_waiting_per_key = 1024;  // shaped requests held per key and event loop

double wall_clock_us() {
    return static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

// Folds the decisions requested during one event-loop turn into one EVALSHA (up to max_batch
// per call): decide() queues and suspends; a flush posted behind the current handlers sends
// the queue; the reply resumes every waiter.
struct limit_checker::batcher {
    struct pending {
        const std::vector<limiters::layer_ref>* refs;
        double cost;
        bool want_state;  ///< the reply should carry a rejecting layer's state (cache)
        chain_decision result;
        limiters::decided_state state;
        double offset_us = 0;  ///< the script's clock minus the local clock at the reply
        std::error_code ec;
        std::optional<net::any_completion_handler<void()>> handler;
    };
    struct answer {
        std::error_code ec;
        chain_decision decision;
        limiters::decided_state state;
        double offset_us = 0;
    };

    batcher(net::any_io_executor ex,
            std::vector<std::unique_ptr<limiters::redis::connection>>& conns, loop_metrics& metrics,
            bool redis_clock)
        : ex_(std::move(ex)), conns_(conns), metrics_(metrics), redis_clock_(redis_clock) {}

    net::awaitable<answer> decide(const std::vector<limiters::layer_ref>& refs, double cost,
                                  bool want_state) {
        pending p{&refs, cost, want_state, {}, {}, 0, {}, {}};
        queue_.push_back(&p);
        if (!flush_posted_) {
            flush_posted_ = true;
            net::post(ex_, [this] { flush(); });
        }
        co_await net::async_initiate<const net::use_awaitable_t<>&, void()>(
            [&p](auto handler) { p.handler.emplace(std::move(handler)); }, net::use_awaitable);
        co_return answer{p.ec, p.result, std::move(p.state), p.offset_us};
    }

    void flush() {
        flush_posted_ = false;
        while (!queue_.empty()) {
            auto n = std::min(max_batch, queue_.size());
            std::vector<pending*> chunk(queue_.begin(),
                                        queue_.begin() + static_cast<std::ptrdiff_t>(n));
            queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
            net::co_spawn(ex_, send(std::move(chunk)), net::detached);
        }
    }

    net::awaitable<void> send(std::vector<pending*> chunk) {
        std::vector<std::pair<const std::vector<limiters::layer_ref>*, double>> reqs;
        std::vector<bool> want(chunk.size());
        reqs.reserve(chunk.size());
        for (std::size_t i = 0; i < chunk.size(); ++i) {
            reqs.push_back({chunk[i]->refs, chunk[i]->cost});
            want[i] = chunk[i]->want_state;
        }
        auto batch = limiters::encode_batch(reqs, redis_clock_ ? -1 : wall_clock_us(), &want);
        std::vector<std::string_view> keys(batch.keys.begin(), batch.keys.end());
        std::vector<std::string_view> args(batch.args.begin(), batch.args.end());
        auto& conn = *conns_[next_++ % conns_.size()];
        metrics_.redis_calls.add();
        metrics_.redis_decisions.add(chunk.size());
        auto started = std::chrono::steady_clock::now();
        auto r = co_await conn.eval(0, keys, args);
        metrics_.redis_latency.observe_us(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started)
                .count());
        double received = wall_clock_us();
        std::vector<chain_decision> decisions;
        std::vector<limiters::decided_state> states;
        double script_now = 0;
        std::error_code ec = r.ec;
        if (!ec && (r.value.is_error() ||
                    !limiters::decode_batch(r.value, decisions, &states, &script_now) ||
                    decisions.size() != chunk.size())) {
            if (r.value.is_error()) spdlog::error("limiter script failed: {}", r.value.str);
            ec = make_error_code(limiters::redis::client_error::protocol_error);
        }
        if (ec) metrics_.redis_errors.add();
        for (std::size_t i = 0; i < chunk.size(); ++i) {
            chunk[i]->ec = ec;
            if (ec) continue;
            chunk[i]->result = decisions[i];
            chunk[i]->state = std::move(states[i]);
            chunk[i]->offset_us = redis_clock_ ? script_now - received : 0;
        }
        // Resume the waiters from a fresh handler each, not inside this loop.
        for (auto* p : chunk)
            if (p->handler) {
                net::post(ex_, [h = std::move(*p->handler)]() mutable { std::move(h)(); });
                p->handler.reset();
            }
    }

    net::any_io_executor ex_;
    std::vector<std::unique_ptr<limiters::redis::connection>>& conns_;
    loop_metrics& metrics_;
    bool redis_clock_;
    std::vector<pending*> queue_;
    bool flush_posted_ = false;
    std::size_t next_ = 0;
};

limit_checker::limit_checker(net::any_io_executor ex, const config::config& cfg,
                             const limiters::policy& policy, limiters::local_store& local,
                             loop_metrics& metrics,
                             std::vector<std::unique_ptr<limiters::redis::connection>>& connections)
    : cfg_(cfg),
      policy_(policy),
      local_(local),
      connections_(connections),
      cache_(cfg.redis ? cfg.redis->over_limit_cache : 0),
      metrics_(metrics) {
    if (cfg.redis && !connections_.empty())
        batcher_ = std::make_unique<batcher>(
            ex, connections_, metrics_,
            cfg.redis->clock == config::redis_config::clock_source::redis);
}

limit_checker::~limit_checker() = default;

bool limit_checker::redis_ready() const {
    for (const auto& c : connections_)
        if (c->state() != limiters::redis::connection::health::down) return true;
    return false;
}

void limit_checker::publish(loop_metrics& m) const {
    m.set_top(top_.snapshot(static_cast<std::int64_t>(wall_clock_us() / 1000)));
    m.cache_entries.store(static_cast<std::int64_t>(cache_.size()), std::memory_order_relaxed);
    if (connections_.empty()) return;
    std::uint64_t commands = 0, writes = 0, reconnects = 0, noscript = 0, timeouts = 0;
    int state = 2;
    for (const auto& c : connections_) {
        auto s = c->stats();
        commands += s.commands_written;
        writes += s.writes;
        reconnects += s.reconnects;
        noscript += s.noscript_retries;
        timeouts += s.timeouts;
        state = std::min(state, static_cast<int>(c->state()));
    }
    m.redis_commands.store(commands, std::memory_order_relaxed);
    m.redis_writes.store(writes, std::memory_order_relaxed);
    m.redis_reconnects.store(reconnects, std::memory_order_relaxed);
    m.redis_noscript.store(noscript, std::memory_order_relaxed);
    m.redis_timeouts.store(timeouts, std::memory_order_relaxed);
    m.redis_state.store(state, std::memory_order_relaxed);
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
    bool cacheable = batcher_ && cache_.capacity() > 0 && max_delay == 0 &&
                     limiters::over_limit_cache::eligible(out.layers);
    if (cacheable && redis_ready()) {
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
        if (batcher_ &&
            !(route.on_redis_error == config::redis_error_policy::local && !redis_ready())) {
            auto a = co_await batcher_->decide(keys.refs, cost, cacheable);
            if (!a.ec) {
                d = a.decision;
                decided = true;
                if (cacheable) cache_.learn(out.layers, keys.refs, d, a.state, a.offset_us);
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
            if (batcher_) {
                out.used_local = true;
                out.redis_failed = true;
            }
            d = local_.decide(keys.refs, wall_clock_us(), cost);
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
