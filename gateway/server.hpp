// The gateway process: one event loop per thread, each with its own SO_REUSEPORT acceptor
// on the listen address, so no lock is shared on the request path.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "limiters/local_store.hpp"
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
    /// Redis reachable from every loop (or no Redis configured): GET /readyz.
    bool ready() const;

  private:
    std::shared_ptr<const config::config> cfg_;
    std::unique_ptr<limiters::policy> policy_;      ///< shared, read-only
    std::unique_ptr<limiters::local_store> local_;  ///< shared in-process limiter state
    std::atomic<std::size_t> open_connections_{0};
    std::vector<std::unique_ptr<worker>> workers_;
    std::vector<std::thread> threads_;
    std::atomic<std::size_t> running_{0};
    std::unique_ptr<class admin_server> admin_;
};

}  // namespace rategate::gateway
