// One event loop's Redis, in the deployment its config names, and the backend that decides over
// it: one server or the master Sentinel names (`connections_per_thread` connections, each loading
// the chain script), or a Redis Cluster (the slot map and a connection per master, loading the
// chain and refund scripts and their cross-slot forms). Besides its backend file, this is the one
// place a new deployment is wired in: the gateway's event loops only call these two functions.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "config/config.hpp"
#include "limiters/backend.hpp"

namespace boost::asio {
class any_io_executor;
}

namespace rategate::limiters::redis {

class connection;
class cluster;

/// The Redis of one event loop. With a `redis` section exactly one of the two is set.
struct deployment {
    std::vector<std::unique_ptr<connection>> connections;  ///< one server, or Sentinel's master
    std::unique_ptr<redis::cluster> cluster;               ///< a Redis Cluster
};

/// Builds, without starting, the Redis of one event loop on `ex` for `cfg` (null: none).
deployment make_deployment(const boost::asio::any_io_executor& ex, const config::redis_config* cfg);

/// Called once per script call: the decisions in it, its latency (µs) and whether it failed.
using call_observer = std::function<void(std::size_t decisions, double latency_us, bool failed)>;

/// The backend that decides chains over `connections` or `cluster` (which outlive it; null when
/// both are empty). `redis_clock`: the script reads Redis TIME (clock "redis"), else each call
/// carries the request's limiter clock.
std::unique_ptr<backend> make_backend(const boost::asio::any_io_executor& ex,
                                      std::vector<std::unique_ptr<connection>>& connections,
                                      redis::cluster* cluster, bool redis_clock,
                                      call_observer observer);

}  // namespace rategate::limiters::redis
