// The admin listener (SPEC §4), on its own address (loopback by default) and its own thread, or
// on the event loop of a one-loop process:
// GET /metrics (Prometheus text 0.0.4), /healthz, /readyz, /config (secrets masked), the
// dashboard page at / with its JSON at /stats, and /top (keys limited most).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "config/config.hpp"

namespace boost::asio {
class io_context;
}

namespace rategate::gateway {

class admin_server {
  public:
    struct handlers {
        std::function<std::string()> metrics;  ///< exposition text
        std::function<bool()> ready;           ///< Redis reachable (or not configured)
        std::function<std::string()> config;   ///< the config in force as JSON, secrets masked
        std::function<std::string()> stats;    ///< the dashboard's JSON (render_stats_json)
        std::function<std::string()> top;      ///< keys limited most (render_top_json)
    };
    /// Binds `at`; throws std::runtime_error when it cannot. Connections get the main
    /// listener's header deadline and size `limits`, and at most 1024 are open at once.
    /// Runs on `loop` when given (an event loop whose thread also calls start and stop), else
    /// on a thread of its own.
    admin_server(const config::host_port& at, const config::limits_config& limits, handlers h,
                 boost::asio::io_context* loop = nullptr);
    ~admin_server();
    void start();
    /// Stops accepting and ends every admin connection: at once on its own thread; on a shared
    /// loop, their waits are cancelled and they end as that loop runs on.
    void stop();

    struct impl;

  private:
    std::unique_ptr<impl> impl_;
};

}  // namespace rategate::gateway
