#include "gateway/runtime/server.hpp"

#include <sys/signalfd.h>
#include <sys/socket.h>

#include <spdlog/spdlog.h>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <stdexcept>

#include "gateway/admin/access_log.hpp"
#include "gateway/admin/admin.hpp"
#include "gateway/runtime/worker.hpp"

namespace rategate::gateway {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

tcp::acceptor bind_acceptor(net::io_context& ioc, const config::host_port& address) {
    tcp::endpoint ep{net::ip::make_address(address.host), address.port};
    tcp::acceptor a(ioc);
    a.open(ep.protocol());
    a.set_option(net::socket_base::reuse_address(true));
    int one = 1;
    if (::setsockopt(a.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
        throw std::runtime_error("cannot set SO_REUSEPORT");
    error_code ec;
    a.bind(ep, ec);
    if (ec)
        throw std::runtime_error("cannot listen on " + address.to_string() + ": " + ec.message());
    a.listen(net::socket_base::max_listen_connections);
    return a;
}

// Runs an event loop by `run` (restarted first): false when a handler threw, which is logged.
template <class Run>
bool run_loop(net::io_context& ioc, Run run) {
    try {
        ioc.restart();
        run();
        return true;
    } catch (const std::exception& e) {
        spdlog::critical("event loop failed: {}", e.what());
        return false;
    }
}

// A signal in `signals` already pending for this thread, taken; -1 when none.
int take_pending(const sigset_t& signals) {
    timespec now{0, 0};
    return sigtimedwait(&signals, nullptr, &now);
}

}  // namespace

// The caller-thread loop's wake-ups (threads: 1): a signalfd of the awaited signals (read
// only for readiness: sigtimedwait takes the signal) and a timer for wait_signal's timeout.
struct server::caller_loop {
    net::posix::stream_descriptor signal_fd;
    net::steady_timer wake;
};

server::server(std::shared_ptr<const config::config> cfg)
    : cfg_(std::move(cfg)),
      policy_(std::make_shared<const limiters::policy>(*cfg_)),
      local_(std::make_unique<limiters::local_store>()) {
    int n = cfg_->threads > 0 ? cfg_->threads
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    on_caller_thread_ = n == 1;
    for (int i = 0; i < n; ++i) {
        auto w = std::make_unique<worker>(cfg_, process_.open_connections, policy_, *local_);
        w->index = workers_.size();
        w->acceptor.emplace(bind_acceptor(w->ioc, cfg_->listen));
        workers_.push_back(std::move(w));
    }
    if (cfg_->admin_listen)
        admin_ = std::make_unique<admin_server>(
            *cfg_->admin_listen, cfg_->limits,
            admin_server::handlers{[this] { return metrics_text(); }, [this] { return ready(); },
                                   [this] {
                                       std::lock_guard lock(mutex_);  // cfg_ changes on reload
                                       return cfg_->json_masked;
                                   },
                                   [this] { return stats_text(); }, [this] { return top_text(); }},
            on_caller_thread_ ? &workers_[0]->ioc : nullptr);
}

server::~server() {
    for (auto& w : workers_)
        w->ioc.stop();
    for (auto& t : threads_)
        if (t.joinable()) t.join();
    caller_.reset();
    if (on_caller_thread_) {
        // Admin sessions live on the loop: they end (or are destroyed) before the admin server.
        for (auto& w : workers_)
            w->tear_down();
        admin_.reset();
    }
}

bool server::run_here(std::chrono::milliseconds limit) {
    auto& ioc = workers_[0]->ioc;
    return !run_loop(ioc, [&] { ioc.run_for(limit); }) || ioc.stopped();
}

int server::wait_signal(const sigset_t& signals, std::chrono::milliseconds timeout) {
    if (!on_caller_thread_) {
        auto s = std::chrono::duration_cast<std::chrono::seconds>(timeout);
        timespec wait{static_cast<time_t>(s.count()),
                      static_cast<long>(std::chrono::nanoseconds(timeout - s).count())};
        return sigtimedwait(&signals, nullptr, &wait);
    }
    if (int sig = take_pending(signals); sig > 0) return sig;
    auto& ioc = workers_[0]->ioc;
    if (!caller_) {
        int fd = ::signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
        if (fd < 0) throw std::runtime_error("signalfd failed");
        caller_.reset(
            new caller_loop{net::posix::stream_descriptor(ioc, fd), net::steady_timer(ioc)});
    }
    auto wake = [&ioc](const error_code& ec) {
        if (!ec) ioc.stop();
    };
    caller_->signal_fd.async_wait(net::posix::descriptor_base::wait_read, wake);
    caller_->wake.expires_after(timeout);
    caller_->wake.async_wait(wake);
    // The loop runs until a signal or the timeout stops it (or it fails: then as a SIGTERM).
    // run(), not run_for(): run_for reads the clock once per handler.
    bool failed = !run_loop(ioc, [&] { ioc.run(); });
    error_code ignored;
    caller_->signal_fd.cancel(ignored);
    caller_->wake.cancel();
    if (failed) return SIGTERM;
    return take_pending(signals);
}

void server::start() {
    if (admin_) admin_->start();
    for (auto& w : workers_) {
        w->start();
        if (on_caller_thread_) break;  // it runs in wait_signal() and stop()
        {
            std::lock_guard lock(running_mutex_);
            ++running_;
        }
        threads_.emplace_back([this, wp = w.get()] {
            if (run_loop(wp->ioc, [wp] { wp->ioc.run(); })) flush_access_log();
            {
                std::lock_guard lock(running_mutex_);
                --running_;
            }
            loop_returned_.notify_all();
        });
    }
}

template <class F>
std::string server::with_loops(F render) const {
    // Every loop is read, under its hold (no install meanwhile: a scrape never straddles the
    // moment a reload moves a loop's counts to its new metrics). The config is read after the
    // loops: each loop is on it or, a reload in progress, on an older one, whose metrics are
    // shown in this config's shape by name (a view) rather than left out of the sums.
    std::vector<std::unique_lock<std::mutex>> locks;
    std::vector<
        std::pair<std::shared_ptr<const config::config>, std::shared_ptr<const loop_metrics>>>
        on;
    for (const auto& w : workers_) {
        auto [lock, loop_cfg, metrics] = w->hold();
        locks.push_back(std::move(lock));
        on.emplace_back(std::move(loop_cfg), std::move(metrics));
    }
    std::shared_ptr<const config::config> cfg;
    {
        std::lock_guard lock(mutex_);
        cfg = cfg_;
    }
    std::vector<std::shared_ptr<const loop_metrics>> held;
    std::vector<const loop_metrics*> loops;
    for (auto& [loop_cfg, metrics] : on) {
        if (loop_cfg != cfg) {
            auto view = std::make_shared<loop_metrics>(cfg->routes.size(), cfg->limiters.size(),
                                                       cfg->upstreams.size());
            view->carry_over(*metrics, *loop_cfg, *cfg, loop_metrics::carry_mode::view);
            view->set_top(metrics->top());
            metrics = std::move(view);
        }
        loops.push_back(metrics.get());
        held.push_back(std::move(metrics));
    }
    return render(*cfg, loops);
}

std::string server::stats_text() const {
    return with_loops([this](const config::config& cfg, const std::vector<const loop_metrics*>& l) {
        double up =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
        return render_stats_json(cfg, process_, l, up);
    });
}

std::string server::top_text() const {
    return with_loops([](const config::config& cfg, const std::vector<const loop_metrics*>& l) {
        return render_top_json(l, cfg.redis ? cfg.redis->key_prefix : "rategate:");
    });
}

std::string server::metrics_text() const {
    return with_loops([this](const config::config& cfg, const std::vector<const loop_metrics*>& l) {
        return render_metrics(cfg, process_, l);
    });
}

bool server::ready() const {
    {
        std::lock_guard lock(mutex_);
        if (!cfg_->redis) return true;
    }
    // Not ready before a loop has published its Redis state once (-1), nor while it is down.
    for (const auto& w : workers_) {
        int state = w->snapshot().second->redis_state.load(std::memory_order_relaxed);
        if (state < 0 || state > 1) return false;
    }
    return true;
}

bool server::serves_tls() const {
    std::lock_guard lock(mutex_);
    return cfg_->tls.has_value();
}

void server::reload(std::shared_ptr<const config::config> next) {
    std::shared_ptr<const config::config> old;
    {
        std::lock_guard lock(mutex_);
        old = cfg_;
    }
    if (next->listen.to_string() != old->listen.to_string() || next->threads != old->threads)
        spdlog::warn("reload: listen and threads changes apply after a restart");
    if ((next->redis.has_value() != old->redis.has_value()) ||
        (next->redis &&
         (next->redis->url != old->redis->url ||
          next->redis->connections_per_thread != old->redis->connections_per_thread ||
          next->redis->password != old->redis->password ||
          next->redis->sentinel.has_value() != old->redis->sentinel.has_value() ||
          next->redis->cluster.has_value() != old->redis->cluster.has_value() ||
          (next->redis->sentinel &&
           (next->redis->sentinel->master != old->redis->sentinel->master ||
            next->redis->sentinel->nodes.size() != old->redis->sentinel->nodes.size())))))
        spdlog::warn("reload: redis connection changes apply after a restart");
    auto policy = std::make_shared<const limiters::policy>(*next);
    {
        std::lock_guard lock(mutex_);
        cfg_ = next;
        policy_ = policy;
    }
    for (auto& w : workers_)
        net::post(w->ioc, [wp = w.get(), next, policy] {
            if (wp->stopping) return;
            // check_resources ran first; a file changed since is what remains: this loop keeps
            // its config rather than end.
            try {
                wp->install(next, policy);
            } catch (const std::exception& e) {
                spdlog::critical("reload not applied on an event loop, its config stays: {}",
                                 e.what());
            }
        });
    process_.config_reloads[static_cast<std::size_t>(reload_outcome::success)].fetch_add(1);
    spdlog::info("reloaded {}: {} routes, {} upstreams, {} limiters", next->source,
                 next->routes.size(), next->upstreams.size(), next->limiters.size());
}

void server::stop(std::chrono::milliseconds deadline) {
    if (admin_) admin_->stop();
    for (auto& w : workers_)
        net::post(w->ioc, [wp = w.get()] { wp->stop(); });
    if (on_caller_thread_) {
        // The loop on this thread runs out of work once its sessions, Redis connections and
        // tickers have ended (worker::stop), as a loop thread's run() returns.
        caller_.reset();
        if (!run_here(deadline)) {
            spdlog::warn("shutdown: requests still in flight after {} ms: cancelling them",
                         deadline.count());
            workers_[0]->cancel_in_flight();
            run_here(std::chrono::seconds(2));
        }
        flush_access_log();
    }
    // Each loop returns by itself once its sessions have ended and its Redis connections and
    // tickers after them (worker::stop); the last one to return wakes this thread.
    std::unique_lock lock(running_mutex_);
    auto all_returned = [this] { return running_ == 0; };
    if (!loop_returned_.wait_for(lock, deadline, all_returned)) {
        // Past the deadline: cancel the remaining requests (and their pending Redis calls)
        // and give them a moment to unwind on their own loops.
        spdlog::warn("shutdown: requests still in flight after {} ms: cancelling them",
                     deadline.count());
        for (auto& w : workers_)
            net::post(w->ioc, [wp = w.get()] { wp->cancel_in_flight(); });
        loop_returned_.wait_for(lock, std::chrono::seconds(2), all_returned);
    }
    lock.unlock();
    for (auto& w : workers_)
        w->ioc.stop();
    for (auto& t : threads_)
        if (t.joinable()) t.join();
    threads_.clear();
    // What is left on a loop is destroyed now, while every worker is intact and the access log
    // still runs, not later in the workers' destructors.
    for (auto& w : workers_)
        w->tear_down();
    // One summary line per loop, from its metrics: what the limiters decided and how Redis
    // calls were batched and pipelined.
    for (std::size_t i = 0; i < workers_.size(); ++i) {
        workers_[i]->publish_metrics();  // its thread has ended: safe to read from here
        const auto& rt = *workers_[i]->rt;
        spdlog::info("loop {}: {}", i, render_summary(*rt.cfg, *rt.metrics));
    }
}

}  // namespace rategate::gateway
