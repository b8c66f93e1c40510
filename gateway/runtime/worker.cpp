#include "gateway/runtime/worker.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gateway/admin/access_log.hpp"
#include "gateway/proxy/session.hpp"
#include "gateway/proxy/tls.hpp"
#include "limiters/redis/cluster.hpp"
#include "limiters/redis/deployment.hpp"

namespace rategate::gateway {

namespace {

bool same_upstream(const config::upstream_config& a, const config::upstream_config& b) {
    if (a.targets.size() != b.targets.size()) return false;
    for (std::size_t i = 0; i < a.targets.size(); ++i)
        if (a.targets[i].host != b.targets[i].host || a.targets[i].port != b.targets[i].port)
            return false;
    auto same_tls = [](const auto& x, const auto& y) {
        if (x.has_value() != y.has_value()) return false;
        return !x || (x->ca_file == y->ca_file && x->server_name == y->server_name &&
                      x->verify == y->verify);
    };
    // Every field a pool reads (upstream_pool, forward.cpp), the protocol included: a pool
    // kept across a change of it would go on speaking the old one.
    return a.protocol == b.protocol && a.connect_timeout == b.connect_timeout &&
           a.response_timeout == b.response_timeout &&
           a.max_idle_per_target == b.max_idle_per_target && same_tls(a.tls, b.tls);
}

namespace net = boost::asio;
using tcp = net::ip::tcp;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

// Publishes what the loop's Redis connections and pools count into its metrics, 4 times a
// second, until cancelled.
net::awaitable<void> metrics_ticker(worker& w) {
    net::steady_timer t(w.ioc);
    for (;;) {
        w.publish_metrics();
        flush_access_log();
        t.expires_after(std::chrono::milliseconds(250));
        auto [ec] = co_await t.async_wait(use_nothrow);
        if (ec) co_return;
    }
}

// Publishes the loop's Redis state (the /readyz and health gauge, the log lines of a connection
// lost, up or moved) the moment it changes: woken by the change signal of `wait`'s connection or
// cluster, until cancelled. The 250 ms metrics ticker publishes it too (for "degraded", which
// ends by time, not by an event).
template <class Wait>
net::awaitable<void> redis_watch(worker& w, Wait wait) {
    for (;;) {
        co_await wait(std::chrono::steady_clock::now() + std::chrono::hours(1));
        auto cs = co_await net::this_coro::cancellation_state;
        if (cs.cancelled() != net::cancellation_type::none) co_return;
        w.publish_redis_state();
    }
}

// At startup, give this loop's Redis connections a moment to connect before taking clients, so
// the first requests are decided by Redis and not by the on_redis_error policy. Clients that
// connect meanwhile wait in the listen backlog.
net::awaitable<void> wait_for_redis(worker& w, std::chrono::milliseconds limit) {
    // Readiness is a signal (connection::wait_up, cluster::wait_ready): nothing polls here.
    auto until = std::chrono::steady_clock::now() + limit;
    for (auto& c : w.redis)
        if (!co_await c->wait_up(until)) break;
    if (w.cluster) co_await w.cluster->wait_ready(until);
    if (w.redis_up() || w.stopping) co_return;
    std::string why = w.redis_error();
    spdlog::warn(
        "Redis not reachable yet ({}): serving, routes apply on_redis_error until it answers",
        why.empty() ? "connecting" : why);
}

// Accepts clients until the acceptor closes; each session is a task of the loop's `sessions`.
net::awaitable<void> accept_loop(worker& w) {
    if (!w.redis.empty() || w.cluster) co_await wait_for_redis(w, std::chrono::milliseconds(3000));
    while (!w.stopping) {
        auto [ec, socket] = co_await w.acceptor->async_accept(use_nothrow);
        if (ec) {
            if (w.stopping || ec == net::error::operation_aborted) break;
            // Out of file descriptors or similar: back off briefly instead of spinning.
            spdlog::warn("accept failed: {}", ec.message());
            net::steady_timer t(w.ioc, std::chrono::milliseconds(20));
            co_await t.async_wait(use_nothrow);
            continue;
        }
        if (w.open_connections.fetch_add(1, std::memory_order_relaxed) >=
            w.rt->cfg->limits.max_connections) {
            w.open_connections.fetch_sub(1, std::memory_order_relaxed);
            boost::system::error_code ignored;
            socket.close(ignored);  // max_connections: refuse rather than queue
            continue;
        }
        boost::system::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        w.sessions.spawn(run_session(w, std::move(socket)));
    }
}

}  // namespace

runtime::runtime(std::shared_ptr<const config::config> c, std::shared_ptr<const limiters::policy> p)
    : cfg(std::move(c)),
      policy(std::move(p)),
      routes(*cfg),
      metrics(std::make_shared<loop_metrics>(cfg->routes.size(), cfg->limiters.size(),
                                             cfg->upstreams.size())),
      client_ip(identity::settings::from(cfg->identity)) {
    std::size_t i = 0;
    for (const auto& [name, u] : cfg->upstreams)
        upstream_index[name] = i++;
}

worker::worker(std::shared_ptr<const config::config> c, std::atomic<std::size_t>& open,
               std::shared_ptr<const limiters::policy> policy, limiters::local_store& local)
    : open_connections(open), local_(local) {
    auto deployment =
        limiters::redis::make_deployment(ioc.get_executor(), c->redis ? &*c->redis : nullptr);
    redis = std::move(deployment.connections);
    cluster = std::move(deployment.cluster);
    install(std::move(c), std::move(policy));
}

runtime::~runtime() {
    worker* w = replaced_on;
    if (!carried || !w || !w->rt || w->rt.get() == this) return;
    try {
        w->rt->metrics->fold_since(*metrics, *carried, *cfg, *w->rt->cfg);
    } catch (const std::exception& e) {
        spdlog::error("loop {}: counts of a replaced config lost: {}", w->index, e.what());
    }
}

namespace {
// Holds the runtime (its pipeline, backend and policy) until the give-back call is answered.
// The old runtime counts the permits; they fold into the runtime in force when it ends.
net::awaitable<void> give_back_leases_of(std::shared_ptr<runtime> old) {
    co_await old->limits->give_back_leases();
}
}  // namespace

worker::~worker() {
    tear_down();
}

void worker::install(std::shared_ptr<const config::config> c,
                     std::shared_ptr<const limiters::policy> policy) {
    auto next = std::make_shared<runtime>(std::move(c), std::move(policy));
    if (const auto& j = next->cfg->identity.jwt) {
        identity::jwt_settings s;
        s.claim = j->claim;
        s.algorithms = j->algorithms;
        s.public_key_pems = j->public_key_pems;
        s.hmac_secret = j->hmac_secret;
        s.issuer = j->issuer;
        s.audience = j->audience;
        s.leeway = std::chrono::duration_cast<std::chrono::seconds>(j->leeway);
        next->jwt = std::make_unique<identity::jwt_verifier>(std::move(s));
        next->jwt_cache = std::make_unique<identity::token_cache>(
            *next->jwt, std::chrono::duration_cast<std::chrono::seconds>(j->leeway).count());
    }
    if (next->cfg->tls) {
        // A certificate that fails to load on reload keeps the previous one (SPEC §3).
        try {
            next->tls = make_server_tls(*next->cfg->tls, next->cfg->http2.enabled);
        } catch (const std::exception& e) {
            if (!rt || !rt->tls) throw;
            spdlog::error("TLS certificate not reloaded, the previous one stays: {}", e.what());
            next->tls = rt->tls;
        }
    }
    const bool redis_clock =
        next->cfg->redis && next->cfg->redis->clock == config::redis_config::clock_source::redis;
    if (next->cfg->redis && (!redis.empty() || cluster)) {
        auto* m = next->metrics.get();  // the runtime owns both: it outlives the backend
        auto observe = [m](std::size_t decisions, double latency_us, bool failed) {
            m->redis_calls.add();
            m->redis_decisions.add(decisions);
            m->redis_latency.observe_us(latency_us);
            if (failed) m->redis_errors.add();
        };
        next->store = limiters::redis::make_backend(ioc.get_executor(), redis, cluster.get(),
                                                    redis_clock, observe);
    }
    // The request path's clock: the wall clock decides under clock "gateway"; under clock
    // "redis" (Redis TIME decides) local time is only measured against Redis's, on the
    // monotonic clock, so that a step of the wall clock moves no cached refusal or lease.
    static const limiters::wall_clock wall_clock;
    static const limiters::monotonic_clock monotonic_clock;
    next->limits = std::make_unique<limiting::pipeline>(
        *next->cfg, *next->policy, local_, *next->metrics, next->store.get(),
        redis_clock ? static_cast<const limiters::clock&>(monotonic_clock) : wall_clock);
    for (const auto& [name, u] : next->cfg->upstreams) {
        std::shared_ptr<upstream_pool> pool;
        if (rt) {
            auto it = rt->pools.find(name);
            if (it != rt->pools.end() && same_upstream(it->second->settings(), u))
                pool = it->second;
        }
        if (!pool) pool = std::make_shared<upstream_pool>(ioc.get_executor(), sweeper, u);
        next->pools.emplace(name, std::move(pool));
    }
    if (rt) {
        // Pools of removed or changed upstreams close their idle connections now; in-flight
        // requests still hold them and finish on them.
        for (auto& [name, pool] : rt->pools) {
            auto it = next->pools.find(name);
            if (it == next->pools.end() || it->second != pool) pool->close_idle();
        }
    }
    // The old pipeline's unspent lease permits go back to Redis now; its requests still in
    // flight finish on it, and what they take after this is dropped with it.
    if (rt && rt->limits) net::co_spawn(ioc, give_back_leases_of(rt), net::detached);
    std::shared_ptr<runtime> old;
    {
        // Counters of the process survive the reload (SPEC §5): the new metrics start from the
        // old ones, and what requests still finishing on the old runtime count there after
        // this folds in when it ends (~runtime). Nothing runs on this loop in between, and no
        // scrape reads across the swap (hold).
        std::lock_guard lock(rt_mutex_);
        if (rt) {
            next->metrics->carry_over(*rt->metrics, *rt->cfg, *next->cfg);
            auto& m = *rt->metrics;
            auto carried =
                std::make_unique<loop_metrics>(m.dims.routes, m.dims.limiters, m.dims.upstreams);
            carried->carry_over(m, *rt->cfg, *rt->cfg);
            rt->carried = std::move(carried);
            rt->replaced_on = this;
        }
        old = std::exchange(rt, std::move(next));
    }
    old.reset();  // folds in now unless a request still holds it
}

std::pair<std::shared_ptr<const config::config>, std::shared_ptr<const loop_metrics>>
worker::snapshot() const {
    std::lock_guard lock(rt_mutex_);
    return {rt->cfg, rt->metrics};
}

std::tuple<std::unique_lock<std::mutex>, std::shared_ptr<const config::config>,
           std::shared_ptr<const loop_metrics>>
worker::hold() const {
    std::unique_lock lock(rt_mutex_);
    auto cfg = rt->cfg;
    auto metrics = rt->metrics;
    return {std::move(lock), std::move(cfg), std::move(metrics)};
}

void worker::start() {
    for (auto& c : redis)
        c->start();
    if (cluster) cluster->start();
    tickers.spawn(accept_loop(*this));
    tickers.spawn(sweeper.run());
    tickers.spawn(metrics_ticker(*this));
    for (auto& c : redis)
        tickers.spawn(
            redis_watch(*this, [c = c.get()](auto until) { return c->wait_change(until); }));
    if (cluster)
        tickers.spawn(
            redis_watch(*this, [c = cluster.get()](auto until) { return c->wait_change(until); }));
}

bool worker::redis_up() const {
    if (cluster) return cluster->ready();
    for (const auto& c : redis)
        if (c->state() == limiters::redis::connection::health::down) return false;
    return true;
}

std::string worker::redis_error() const {
    if (cluster) return cluster->last_error();
    for (const auto& c : redis)
        if (c->state() == limiters::redis::connection::health::down) return c->last_error();
    return {};
}

void worker::log_redis_changes() {
    if (cluster) {
        bool up = cluster->ready();
        if (up && !cluster_seen_up_) {
            std::string masters;
            for (const auto& m : cluster->masters())
                masters += (masters.empty() ? "" : ", ") + m.address;
            spdlog::info("loop {}: Redis Cluster ready: masters {}", index, masters);
        } else if (!up && cluster_seen_up_) {
            spdlog::warn("loop {}: Redis Cluster not ready ({}): routes apply on_redis_error",
                         index, cluster->last_error());
        }
        cluster_seen_up_ = up;
        return;
    }
    redis_seen_.resize(redis.size());
    for (std::size_t i = 0; i < redis.size(); ++i) {
        auto& seen = redis_seen_[i];
        bool up = redis[i]->state() != limiters::redis::connection::health::down;
        auto at = redis[i]->address();
        auto generation = redis[i]->generation();
        if (up && (!seen.up || at != seen.address)) {
            if (seen.address.empty())
                spdlog::debug("loop {}: Redis connection {} up: {}", index, i, at);
            else
                spdlog::info("loop {}: Redis connection {} up: {}{}", index, i, at,
                             at != seen.address ? " (was " + seen.address + ")" : std::string());
        } else if (!up && (seen.up || generation != seen.generation) && !stopping) {
            // Also a connection that came up and dropped again between two looks (not the
            // close of a stop: that is no loss).
            spdlog::warn(
                "loop {}: Redis connection {} to {} lost ({}): routes apply on_redis_error", index,
                i, seen.up ? seen.address : at, redis[i]->last_error());
        }
        if (up) seen.address = at;
        seen.up = up;
        seen.generation = generation;
    }
}

void worker::publish_redis_state() {
    if (redis.empty() && !cluster) return;
    log_redis_changes();
    auto& m = *rt->metrics;
    int state = cluster ? (cluster->ready() ? 0 : 2) : 2;
    std::uint64_t commands = 0, writes = 0, reconnects = 0, noscript = 0, timeouts = 0;
    auto add = [&](const limiters::redis::connection::counters& s) {
        commands += s.commands_written;
        writes += s.writes;
        reconnects += s.reconnects;
        noscript += s.noscript_retries;
        timeouts += s.timeouts;
    };
    for (const auto& c : redis) {
        add(c->stats());
        state = std::min(state, static_cast<int>(c->state()));
    }
    if (cluster) {
        add(cluster->stats());
        const auto& t = cluster->counts();
        m.cluster_redirects.store(t.moved + t.ask, std::memory_order_relaxed);
        m.cluster_split_chains.store(t.split_chains, std::memory_order_relaxed);
        m.cluster_refunds.store(t.refunds, std::memory_order_relaxed);
        m.cluster_refund_failures.store(t.refund_failures, std::memory_order_relaxed);
    }
    m.redis_commands.store(commands, std::memory_order_relaxed);
    m.redis_writes.store(writes, std::memory_order_relaxed);
    m.redis_reconnects.store(reconnects, std::memory_order_relaxed);
    m.redis_noscript.store(noscript, std::memory_order_relaxed);
    m.redis_timeouts.store(timeouts, std::memory_order_relaxed);
    m.redis_state.store(state, std::memory_order_relaxed);
}

void worker::publish_metrics() {
    rt->limits->publish(*rt->metrics);
    publish_redis_state();
    std::int64_t idle = 0;
    for (const auto& [name, p] : rt->pools)
        idle += static_cast<std::int64_t>(p->idle_count());
    rt->metrics->upstream_idle.store(idle, std::memory_order_relaxed);
}

std::unique_ptr<char[]> worker::take_buffer() {
    if (free_buffers_.empty()) return std::make_unique<char[]>(relay_buffer_size);
    auto b = std::move(free_buffers_.back());
    free_buffers_.pop_back();
    return b;
}

void worker::give_buffer(std::unique_ptr<char[]> b) {
    if (free_buffers_.size() < 64) free_buffers_.push_back(std::move(b));
}

// The stop path as one coroutine: sessions, then Redis, then the tickers, each awaited.
net::awaitable<void> worker::drain() {
    sessions.emit(net::cancellation_type::partial);
    co_await sessions.wait();
    // Unspent lease permits go back before the connections close (no idle wait at a stop).
    if (auto current = rt; current && current->limits) co_await current->limits->give_back_leases();
    // Every request had its limiter decision: Redis answers what it still has, then closes.
    for (auto& c : redis)
        c->stop();
    if (cluster) cluster->stop();
    tickers.emit(net::cancellation_type::terminal);
    co_await tickers.wait();
}

void worker::stop() {
    if (stopping) return;
    stopping = true;
    if (acceptor) {
        boost::system::error_code ignored;
        acceptor->close(ignored);
    }
    for (auto& [name, p] : rt->pools)
        p->close_idle();
    net::co_spawn(ioc, drain(), [i = index](std::exception_ptr e) {
        if (!e) return;
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& ex) {
            spdlog::error("loop {}: drain ended by exception: {}", i, ex.what());
        }
    });
}

void worker::cancel_in_flight() {
    stopping = true;
    sessions.emit(net::cancellation_type::terminal);
    for (auto& c : redis)
        c->close();
    if (cluster) cluster->close();
}

void worker::tear_down() {
    if (torn_down_) return;
    torn_down_ = true;
    stopping = true;
    for (auto& c : redis)
        c->close();
    if (cluster) cluster->close();
    // Waiters the close just completed resume and unwind; then whatever still waits (a timer,
    // an upstream read) is destroyed while the worker and its task groups exist.
    ioc.restart();
    for (int i = 0; i < 100 && ioc.poll() > 0; ++i) {
    }
    ioc.discard_pending();
}

}  // namespace rategate::gateway
