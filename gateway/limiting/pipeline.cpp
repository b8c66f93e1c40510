#include "gateway/limiting/pipeline.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include "gateway/admin/metrics.hpp"

namespace rategate::gateway::limiting {

namespace net = boost::asio;
using limiters::chain_decision;

namespace {

constexpr std::size_t max_waiting_per_key = 1024;  // shaped requests held per key and event loop

net::awaitable<void> sleep_us(double us) {
    net::steady_timer t(co_await net::this_coro::executor,
                        std::chrono::microseconds(static_cast<std::int64_t>(us)));
    co_await t.async_wait(net::as_tuple(net::use_awaitable));
}

// Requests held for a delay layer, counted per layer key while they wait.
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
};

// Storage a request uses while it is decided, taken from the loop's spares and given back after:
// vectors and key strings keep their capacity from request to request.
template <class T>
struct pooled {
    std::vector<std::unique_ptr<T>>& spare;
    std::unique_ptr<T> item;
    explicit pooled(std::vector<std::unique_ptr<T>>& s) : spare(s) {
        if (spare.empty()) {
            item = std::make_unique<T>();
        } else {
            item = std::move(spare.back());
            spare.pop_back();
        }
    }
    ~pooled() {
        if (spare.size() < 256) spare.push_back(std::move(item));
    }
    pooled(const pooled&) = delete;
    pooled& operator=(const pooled&) = delete;
    T& operator*() { return *item; }
};

}  // namespace

// What decide_shared keeps for one request (pooled).
struct pipeline::lease_scratch {
    std::vector<limiters::lease_book::reservation> held;  ///< per chain position
    std::vector<limiters::lease_book::slot> slots;        ///< per chain position (leased)
    std::vector<limiters::layer_ref> sent;                ///< the layers in the call
    std::vector<std::size_t> at;                          ///< chain position of each sent
};

limiters::lease_book::slot pipeline::lease_slot(std::size_t route_index,
                                                const limiters::policy::layer& l,
                                                const std::string& key) {
    // A leased layer is global or per route: its key is fixed by the route and the layer.
    auto& s = lease_slots_[route_index * cfg_.limiters.size() + l.index];
    if (!s) s = leases_.slot_of(key);
    return s;
}

pipeline::pipeline(const config::config& cfg, const limiters::policy& policy,
                   limiters::local_store& local, loop_metrics& metrics, limiters::backend* shared,
                   const limiters::clock& clock, options opts)
    : cfg_(cfg),
      policy_(policy),
      local_(local),
      shared_(shared),
      clock_(clock),
      opts_(opts),
      cache_(cfg.redis ? cfg.redis->over_limit_cache : 0),
      metrics_(metrics),
      sweeper_(std::make_shared<lease_sweeper>()),
      lease_slots_(cfg.routes.size() * cfg.limiters.size()) {}

// The idle give-back's state, shared by the pipeline and its sweep: the sweep outlives a
// pipeline that a reload drops, and then touches nothing of it.
struct pipeline::lease_sweeper {
    bool alive = true;                   ///< the pipeline still exists
    bool running = false;                ///< a sweep is spawned
    bool stopped = false;                ///< give_back_leases() ran: no sweep any more
    net::steady_timer* timer = nullptr;  ///< the sweep's, while it waits
};

pipeline::~pipeline() {
    sweeper_->alive = false;
    if (sweeper_->timer) sweeper_->timer->cancel();
}

net::awaitable<void> pipeline::sweep_leases(std::shared_ptr<lease_sweeper> s) {
    net::steady_timer t(co_await net::this_coro::executor);
    struct unhook {
        lease_sweeper& s;
        ~unhook() {
            s.timer = nullptr;
            s.running = false;
        }
    } guard{*s};
    s->timer = &t;
    for (;;) {
        t.expires_after(std::chrono::milliseconds(250));
        co_await t.async_wait(net::as_tuple(net::use_awaitable));
        if (!s->alive || s->stopped) co_return;
        double now = clock_.now_us();
        auto idle = leases_.take_idle(now);
        if (!idle.empty()) {
            double permits = 0;
            for (const auto& r : idle)
                permits += r.permits;
            std::error_code ec = co_await shared_->give_back(std::move(idle));
            if (!s->alive) co_return;
            leases_.given_back(permits, !ec);
            count_leases();
        }
        if (leases_.held(clock_.now_us()) <= 0) co_return;  // the next grant sweeps again
    }
}

net::awaitable<void> pipeline::give_back_leases() {
    sweeper_->stopped = true;
    if (sweeper_->timer) sweeper_->timer->cancel();  // the sweep ends at once
    if (!shared_) co_return;
    auto held = leases_.take_all(clock_.now_us());
    if (held.empty()) co_return;
    double permits = 0;
    for (const auto& r : held)
        permits += r.permits;
    auto alive = sweeper_;  // `this` may not outlive the call (a reload during a stop)
    std::error_code ec = co_await shared_->give_back(std::move(held));
    if (!alive->alive) co_return;
    leases_.given_back(permits, !ec);
    count_leases();
}

bool pipeline::redis_ready() const {
    return shared_ && shared_->ready();
}

void pipeline::publish(loop_metrics& m) const {
    double now = clock_.now_us();
    m.set_top(top_.snapshot(static_cast<std::int64_t>(now / 1000)));
    m.cache_entries.store(static_cast<std::int64_t>(cache_.size()), std::memory_order_relaxed);
    m.lease_permits_held.store(std::llround(leases_.held(now)), std::memory_order_relaxed);
}

void pipeline::count_leases() {
    const auto& t = leases_.running_totals();
    if (t.grants == leases_counted_.grants && t.granted == leases_counted_.granted &&
        t.expired == leases_counted_.expired && t.given_back == leases_counted_.given_back)
        return;
    auto whole = [](double v) { return static_cast<std::uint64_t>(std::llround(v)); };
    metrics_.lease_grants.add(t.grants - leases_counted_.grants);
    metrics_.lease_permits.add(whole(t.granted) - whole(leases_counted_.granted));
    metrics_.lease_permits_expired.add(whole(t.expired) - whole(leases_counted_.expired));
    metrics_.lease_permits_given_back.add(whole(t.given_back) - whole(leases_counted_.given_back));
    leases_counted_ = t;
}

net::awaitable<limiters::backend::answer> pipeline::decide_shared(
    std::size_t route_index, const std::vector<const limiters::policy::layer*>& layers,
    const std::vector<limiters::layer_ref>& refs, double cost, bool want_state) {
    // Each leased layer takes what its lease holds; what it lacks (`need`), a top-up when the
    // lease runs low, and every exact layer go in the call.
    const std::size_t n = refs.size();
    double now = clock_.now_us();
    pooled<lease_scratch> scratch(spare_scratch_);
    auto& [held, slots, sent, at] = *scratch;
    held.assign(n, {});
    slots.assign(n, {});
    at.clear();
    std::size_t m = 0;  // layers in the call; sent's strings are written in place
    auto send = [&](const limiters::layer_ref& ref, const limiters::lease_ask& ask) {
        if (m == sent.size()) sent.emplace_back();
        auto& r = sent[m++];
        r.key.assign(ref.key);
        r.spec = ref.spec;
        r.lease = ask;
    };
    bool must_call = false, top_up = false;
    for (std::size_t i = 0; i < n; ++i) {
        int lease = layers[i]->limiter->lease;
        if (lease > 0) {
            slots[i] = lease_slot(route_index, *layers[i], refs[i].key);
            held[i] = leases_.reserve(slots[i], lease, cost, now);
            if (held[i].ask.want <= 0) continue;
            send(refs[i], held[i].ask);
            (held[i].ask.need > 0 ? must_call : top_up) = true;
        } else {
            send(refs[i], {});
            must_call = true;
        }
        at.push_back(i);
    }
    sent.resize(m);
    limiters::backend::answer a;
    bool called = must_call || (top_up && shared_->ready());
    if (called) a = co_await shared_->decide(sent, cost, clock_, want_state);
    now = clock_.now_us();
    if (called && a.ec && must_call) {
        // Redis failed a call the request needed: nothing was taken; on_redis_error decides.
        for (std::size_t i = 0; i < n; ++i)
            if (int lease = layers[i]->limiter->lease; lease > 0)
                leases_.settle(slots[i], *refs[i].spec, lease, held[i], nullptr, false, now, 0);
        count_leases();
        co_return a;
    }
    limiters::chain_decision d;  // every leased layer served from its lease: admitted
    if (called && !a.ec) {
        // Back to chain positions.
        d = a.decision;
        auto pos = [&](int k) {
            return k >= 0 ? static_cast<int>(at[static_cast<std::size_t>(k)]) : -1;
        };
        d.decider = pos(d.decider);
        d.header_layer = pos(d.header_layer);
        d.shadow_mask = 0;
        for (std::size_t k = 0; k < at.size(); ++k)
            if (a.decision.shadow_mask & (1u << k)) d.shadow_mask |= 1u << at[k];
    }
    a.ec = {};  // a failed top-up leaves the request to its lease
    std::size_t g = 0;
    for (std::size_t i = 0, k = 0; i < n; ++i) {
        bool sent_here = k < at.size() && at[k] == i;
        if (sent_here) ++k;
        int lease = layers[i]->limiter->lease;
        if (lease <= 0) continue;
        const limiters::lease_grant* grant = nullptr;
        if (sent_here && called && g < a.grants.size()) grant = &a.grants[g++];
        double expiry = grant ? limiters::lease_book::expiry_of(*refs[i].spec, a.decided_at_us) -
                                    a.clock_offset_us
                              : 0;
        leases_.settle(slots[i], *refs[i].spec, lease, held[i], grant, d.allowed, now, expiry,
                       a.decided_at_us);
    }
    count_leases();
    if (!sweeper_->running && !sweeper_->stopped && leases_.held(now) > 0) {
        // Idle leases go back to Redis: a sweep on this loop while leases hold permits.
        sweeper_->running = true;
        net::co_spawn(co_await net::this_coro::executor, sweep_leases(sweeper_), net::detached);
    }
    if (d.allowed) {
        // The header layer: the fewest permits left, first on ties, a leased layer's remaining
        // being Redis's after its last grant plus this loop's unspent permits.
        int best = d.header_layer;
        double best_remaining = best >= 0 ? d.remaining : std::numeric_limits<double>::infinity();
        for (std::size_t i = 0; i < n; ++i) {
            if (layers[i]->limiter->lease <= 0) continue;
            auto s = leases_.standing_of(slots[i], now);
            int here = static_cast<int>(i);
            if (s.remaining < best_remaining || (s.remaining == best_remaining && here < best)) {
                best = here;
                best_remaining = s.remaining;
                d.remaining = std::floor(s.remaining);
                d.reset_us = std::ceil(s.reset_us);
                d.rule = s.rule;
            }
        }
        d.header_layer = best;
    }
    a.decision = d;
    co_return a;
}

net::awaitable<outcome> pipeline::check(std::size_t route_index, const limiters::identity& who,
                                        double cost) {
    const auto& route = cfg_.routes[route_index];
    // The keys' storage is this loop's, used again by the next request.
    pooled<limiters::policy::request_keys> pooled_keys(spare_keys_);
    auto& keys = *pooled_keys;
    policy_.keys_for(route_index, who, keys);
    outcome out;
    auto refuse = [&](verdict v, const limiters::policy::layer* by) {
        out.what = v;
        out.forward = false;
        out.decider = by;
    };
    // Every answer is classified and counted on its way out (moved into the result).
    auto finish = [&]() -> outcome&& {
        if (out.forward && out.what != verdict::error) {
            const auto& d = out.decision;
            out.what = d.wait_us > 0   ? verdict::delayed
                       : d.shadow_mask ? verdict::shadow_limited
                                       : verdict::allowed;
        }
        count(out, keys.layers, metrics_);
        return std::move(out);
    };
    if (keys.denied_by) {
        refuse(verdict::denied, keys.denied_by);
        co_return finish();
    }
    if (keys.invalid_by) {
        refuse(verdict::invalid_identity, keys.invalid_by);
        co_return finish();
    }
    if (keys.refs.empty()) co_return finish();
    const auto& layers = keys.layers;  // the chain as decided (skipped layers left out)
    if (opts_.costs_beyond_routes) cost_ceiling_ = std::max(cost_ceiling_, cost);

    // Shaping: requests held for a delayed layer are bounded per key and event loop.
    double max_delay = 0;
    for (const auto* l : layers)
        max_delay = std::max(max_delay, l->spec.shadow ? 0 : l->spec.delay_us);
    bool holds = max_delay > 0 && opts_.delays == shaping::wait;
    std::vector<std::string> held;
    if (holds) {
        for (std::size_t i = 0; i < layers.size(); ++i)
            if (layers[i]->spec.delay_us > 0) {
                // find(), not operator[]: a lookup must not leave an entry behind when a later
                // delay layer of the chain refuses the request.
                auto held_now = waiting_.find(keys.refs[i].key);
                if (held_now != waiting_.end() && held_now->second >= max_waiting_per_key) {
                    refuse(verdict::limited, layers[i]);
                    out.header = layers[i];
                    out.decision.allowed = false;
                    out.decision.retry_us = layers[i]->spec.delay_us;
                    co_return finish();
                }
                held.push_back(keys.refs[i].key);
            }
    }
    hold_guard hold(waiting_, held);

    // The exact over-limit cache (limiters/local/over_limit_cache.hpp): a rejection it can
    // prove is answered here, the way Redis would answer it, while Redis is reachable.
    bool cacheable = shared_ && cache_.capacity() > 0 && max_delay == 0 &&
                     limiters::over_limit_cache::eligible(layers);
    // A leased layer's refusal learned from Redis holds while this loop's lease is empty (the
    // request then needs its whole cost from Redis); a lease with permits decides first.
    bool lease_serves = false;
    for (std::size_t i = 0; i < layers.size(); ++i)
        if (layers[i]->limiter->lease > 0 &&
            leases_.unspent(lease_slot(route_index, *layers[i], keys.refs[i].key),
                            clock_.now_us()) > 0)
            lease_serves = true;
    if (cacheable && !lease_serves && redis_ready()) {
        // After a reconnect (Redis restarted, failed over) its state may differ from what the
        // cache learned: start over.
        if (auto epoch = shared_->epoch(); epoch != cache_epoch_) {
            cache_.clear();
            cache_epoch_ = epoch;
        }
        double now = clock_.now_us();
        if (auto hit = cache_.lookup(layers, keys.refs, now, cost, cost_ceiling_)) {
            auto at = static_cast<std::size_t>(hit->decider);
            refuse(verdict::limited, layers[at]);
            out.decision = *hit;
            out.header = out.decider;
            out.cached = true;
            top_.add(keys.refs[at].key, static_cast<std::int64_t>(now / 1000));
            co_return finish();
        }
    }

    bool leased = false;
    if (shared_ && shared_->leases())
        for (const auto* l : layers)
            leased = leased || l->limiter->lease > 0;
    double waited = 0;
    for (;;) {
        chain_decision d;
        bool decided = false;
        // "local" goes local at once while Redis is down, unless a lease may serve the chain.
        if (shared_ && (leased || !(route.on_redis_error == config::redis_error_policy::local &&
                                    !redis_ready()))) {
            limiters::backend::answer a;
            if (leased)
                a = co_await decide_shared(route_index, layers, keys.refs, cost, cacheable);
            else
                a = co_await shared_->decide(keys.refs, cost, clock_, cacheable);
            if (!a.ec) {
                d = a.decision;
                decided = true;
                if (cacheable) cache_.learn(layers, keys.refs, d, a.state, a.clock_offset_us);
            } else {
                out.redis_error = a.ec;
                if (route.on_redis_error == config::redis_error_policy::allow) {
                    out.what = verdict::error;  // fail open: forwarded, no headers
                    co_return finish();
                }
                if (route.on_redis_error == config::redis_error_policy::deny) {
                    refuse(verdict::error, nullptr);  // 503
                    co_return finish();
                }
            }
        }
        if (!decided) {
            if (shared_) {
                out.used_local = true;
                if (!out.redis_error)
                    out.redis_error = std::make_error_code(std::errc::not_connected);
            }
            d = local_.decide_now(keys.refs, cost, clock_.now_us());
        }
        out.decision = d;
        out.header =
            d.header_layer >= 0 ? layers[static_cast<std::size_t>(d.header_layer)] : nullptr;
        if (d.allowed) {
            if (d.wait_us > 0 && opts_.delays == shaping::wait) co_await sleep_us(d.wait_us);
            co_return finish();
        }
        // A window layer in delay mode says when to decide again; it reserves nothing.
        if (holds && d.wait_us > 0 && waited + d.wait_us <= max_delay) {
            waited += d.wait_us;
            co_await sleep_us(d.wait_us + 1);
            continue;
        }
        refuse(verdict::limited, layers[static_cast<std::size_t>(d.decider)]);
        top_.add(keys.refs[static_cast<std::size_t>(d.decider)].key,
                 static_cast<std::int64_t>(clock_.now_us() / 1000));
        co_return finish();
    }
}

}  // namespace rategate::gateway::limiting
