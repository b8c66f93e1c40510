// The Redis backend of one event loop: the chain decisions requested during one event-loop
// turn are folded into one EVALSHA of the chain script (up to 64 per call), sent round-robin
// over the loop's connections (one server, or the master Sentinel names; see connection.hpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "limiters/backend.hpp"

namespace boost::asio {
class any_io_executor;
}

namespace rategate::limiters::redis {
class connection;
}

namespace rategate::limiters {

class redis_backend final : public backend {
  public:
    /// Called once per EVALSHA: decisions in it, its latency (µs) and whether it failed.
    using call_observer =
        std::function<void(std::size_t decisions, double latency_us, bool failed)>;

    /// `connections` (not empty, each started elsewhere) belong to the event loop of `ex` and
    /// outlive the backend. `redis_clock`: the script reads Redis TIME (clock "redis"), else
    /// the time of the first request's clock is sent with each call.
    redis_backend(const boost::asio::any_io_executor& ex,
                  std::vector<std::unique_ptr<redis::connection>>& connections, bool redis_clock,
                  call_observer observer = {});
    ~redis_backend() override;

    boost::asio::awaitable<answer> decide(const std::vector<layer_ref>& refs, double cost,
                                          const clock& at, bool want_state) override;
    /// Leased layers go in the chain call as asks (SPEC §2 `sync`).
    bool leases() const override { return true; }
    /// One call of the give-back script (script 1 of each connection) on the next connection.
    boost::asio::awaitable<std::error_code> give_back(std::vector<lease_return> items) override;
    /// True while any of the loop's connections is up.
    bool ready() const override;
    /// The sum of the connections' generations: changes on every reconnect.
    std::uint64_t epoch() const override;

    /// Decisions per EVALSHA at most.
    static constexpr std::size_t max_batch = 64;

    struct impl;

  private:
    std::unique_ptr<impl> impl_;
};

}  // namespace rategate::limiters
