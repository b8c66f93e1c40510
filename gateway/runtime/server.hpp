// The gateway process: one event loop per thread, each with its own SO_REUSEPORT acceptor
// on the listen address, so no lock is shared on the request path (threads: 1 runs its loop on
// the main thread: a one-thread process).
#pragma once

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "gateway/admin/metrics.hpp"
#include "limiters/local/local_store.hpp"
#include "limiters/policy.hpp"

namespace rategate::gateway {

class worker;

class server {
  public:
    /// Binds every worker's acceptor; throws std::runtime_error when the address is unusable.
    explicit server(std::shared_ptr<const config::config> cfg);
    ~server();

    /// Starts one thread per worker and returns. With one worker (threads: 1) no thread starts:
    /// its event loop runs on the caller's thread, inside wait_signal() and stop(), and the
    /// admin listener shares it, so the process has one thread (a second one makes every
    /// socket call dearer: the kernel's fdget/fput take their atomic path).
    void start();

    /// Waits up to `timeout` for one of `signals` (blocked on every thread) and returns it, or
    /// -1 when none came. With the event loop on this thread, the loop runs meanwhile (a
    /// signalfd wakes it).
    int wait_signal(const sigset_t& signals, std::chrono::milliseconds timeout);

    /// Graceful stop (SPEC §1): stop accepting, let in-flight requests finish up to
    /// `deadline`, close idle keep-alives, then stop every loop and join the threads.
    void stop(std::chrono::milliseconds deadline);

    std::size_t thread_count() const { return workers_.size(); }

    /// The Prometheus exposition of every loop's metrics (what GET /metrics serves).
    std::string metrics_text() const;
    /// The dashboard's JSON and the keys limited most (admin /stats and /top).
    std::string stats_text() const;
    std::string top_text() const;
    /// Redis reachable from every loop (or no Redis configured): GET /readyz.
    bool ready() const;

    /// Hot reload (SPEC §5): `next` is already validated. New requests use it; in-flight ones
    /// finish on the old routes; unchanged upstream pools and the Redis connections carry over
    /// (limiter state lives in Redis or the shared in-process store and survives). Settings
    /// that need new sockets (listen, threads, admin, redis) are kept and logged.
    void reload(std::shared_ptr<const config::config> next);
    /// Whether the config in force has a listener certificate (a reload's failing pair then
    /// keeps it, SPEC §3).
    bool serves_tls() const;
    /// Counts a reload refused because the new file was invalid.
    void reload_failed() {
        process_.config_reloads[static_cast<std::size_t>(reload_outcome::failure)].fetch_add(1);
    }

  private:
    std::shared_ptr<const config::config> cfg_;
    std::shared_ptr<const limiters::policy> policy_;  ///< shared, read-only, replaced on reload
    mutable std::mutex mutex_;                        ///< guards cfg_/policy_ for reload and admin
    process_metrics process_;  ///< open connections and reloads (RATEGATE_METRICS)
    const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
    /// Calls `render` with the config in force and the metrics of every loop, in its shape (a
    /// loop still on an older config is shown by name), each loop's install held off meanwhile.
    template <class F>
    std::string with_loops(F render) const;
    std::unique_ptr<limiters::local_store> local_;  ///< shared in-process limiter state
    std::vector<std::unique_ptr<worker>> workers_;
    std::vector<std::thread> threads_;
    std::mutex running_mutex_;
    std::size_t running_ = 0;                ///< event loops still running (running_mutex_)
    std::condition_variable loop_returned_;  ///< a loop's run() returned
    std::unique_ptr<class admin_server> admin_;
    /// threads: 1 — the one loop runs on the thread that calls wait_signal() and stop().
    bool on_caller_thread_ = false;
    struct caller_loop;
    std::unique_ptr<caller_loop> caller_;  ///< its signalfd and wake-up timer (wait_signal)
    /// Runs the caller-thread loop until it is stopped or out of work, at most `limit`; true
    /// when it ran out of work. An exception that escapes a handler is logged and ends it.
    bool run_here(std::chrono::milliseconds limit);
};

}  // namespace rategate::gateway
