// The gateway process: one event loop per thread, each with its own SO_REUSEPORT acceptor
// on the listen address, so no lock is shared on the request path.
#pragma once

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

    /// Starts one thread per worker and returns.
    void start();

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
    /// Calls `render` with the config in force and the metrics of every loop running it.
    template <class F>
    std::string with_loops(F render) const;
    std::unique_ptr<limiters::local_store> local_;  ///< shared in-process limiter state
    std::vector<std::unique_ptr<worker>> workers_;
    std::vector<std::thread> threads_;
    std::mutex running_mutex_;
    std::size_t running_ = 0;                ///< event loops still running (running_mutex_)
    std::condition_variable loop_returned_;  ///< a loop's run() returned
    std::unique_ptr<class admin_server> admin_;
};

}  // namespace rategate::gateway
