// Redis Cluster for one event loop: the slot map, learned from any seed node (CLUSTER SLOTS)
// and kept current, and one multiplexed connection per master (connection.hpp: pipelining,
// handshake with SCRIPT LOAD, reconnects). eval() sends a script call to the master of a slot
// and follows the cluster's answers (Redis Cluster specification, "Redirection and
// resharding"; the way redis-py's and Lettuce's cluster clients do it):
//   MOVED      the slot has a new owner: the call is retried there at once and the map re-read;
//   ASK        the slot is migrating: the call is retried once at the importing node, after
//              ASKING in the same write;
//   TRYAGAIN   keys of the call are split between two nodes for a moment: retried after a
//              short pause while command_timeout lasts;
//   CLUSTERDOWN, a lost or refused connection: the call fails (the route's on_redis_error)
//              and the map is re-read, so a failover needs no restart.
// The map is also re-read every refresh_interval. Masters that leave the map (a failover
// turned them into replicas, or they were removed) have their connections drained.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "limiters/redis/connection.hpp"
#include "limiters/redis/endpoint.hpp"

namespace rategate::limiters::redis {

struct cluster_settings {
    std::vector<endpoint> seeds;  ///< asked for the slot map when no master answers
    /// Credentials and timeouts of every node; host, port, sentinel and db are not used
    /// (a cluster has database 0 only).
    connection_settings node;
    std::chrono::milliseconds refresh_interval{2000};  ///< the map is re-read this often
};

class cluster {
  public:
    cluster(boost::asio::any_io_executor ex, cluster_settings settings,
            std::vector<script> scripts);
    ~cluster();  ///< close()
    cluster(const cluster&) = delete;
    cluster& operator=(const cluster&) = delete;

    /// Starts learning the map and connecting to the masters, in the background.
    void start();
    /// Graceful stop: calls already sent get their replies, then every connection closes.
    void stop();
    /// Immediate stop: pending calls complete with `stopped`.
    void close();

    /// EVALSHA of script `index` on the master serving `slot`; every key must hash to
    /// `slot`. Follows MOVED, ASK and TRYAGAIN as above. Errors: those of connection::exec,
    /// and not_connected when no reachable master serves the slot.
    boost::asio::awaitable<result> eval(std::uint16_t slot, std::size_t index,
                                        const std::vector<std::string_view>& keys,
                                        const std::vector<std::string_view>& args);

    /// The index (in masters()) of the master serving `slot` in the current map, if any, and
    /// the map's version: pass both to eval_on_master().
    std::optional<std::size_t> master_of(std::uint16_t slot) const;
    std::uint64_t map_version() const;
    /// host:port of the master serving `slot` in the current map, if any.
    std::optional<std::string> master_address(std::uint16_t slot) const;

    /// EVALSHA of script `index` with no declared keys on master `master` of map `version`
    /// (a script that finds its keys in `args`: one call for keys of several slots). Fails with
    /// not_connected, without sending, when the map changed since. No redirection is followed:
    /// a key that is not that master's fails the call with an error reply.
    boost::asio::awaitable<result> eval_on_master(std::size_t master, std::uint64_t version,
                                                  std::size_t index,
                                                  const std::vector<std::string_view>& args);

    /// Every slot has a master and every master's connection is up (SPEC §2: /readyz).
    bool ready() const;
    /// Readiness without polling: completes with true once ready() holds (a map read, a
    /// master's connection coming up), with false at `deadline` or once the cluster stops; at
    /// once when ready now. Call it on the executor's thread.
    boost::asio::awaitable<bool> wait_ready(std::chrono::steady_clock::time_point deadline);
    /// Completes at the next change that may change ready() (a new map, a master's connection
    /// changing phase or failing a connect, stop) with true, or at `deadline` with false.
    boost::asio::awaitable<bool> wait_change(std::chrono::steady_clock::time_point deadline);
    /// Changes whenever the map changes or a master's connection reconnects.
    std::uint64_t epoch() const;
    /// The masters' connections' counters, summed.
    connection::counters stats() const;
    /// Why the cluster is not ready ("" when it is).
    std::string last_error() const;

    struct master_status {
        std::string address;  ///< host:port
        bool up = false;
        std::string error;  ///< its connection's last error
    };
    /// Every master of the current map.
    std::vector<master_status> masters() const;

    /// What happened on the way: redirections followed, maps read, and the refunds of split
    /// chains (counted by limiters/redis/cluster_backend.cpp, here so that they survive a
    /// reload's new backend).
    struct tally {
        std::uint64_t moved = 0;
        std::uint64_t ask = 0;
        std::uint64_t tryagain = 0;
        std::uint64_t map_reads = 0;        ///< slot maps read and applied
        std::uint64_t split_chains = 0;     ///< requests whose chain spans slots
        std::uint64_t refunds = 0;          ///< refund calls sent
        std::uint64_t refunded_layers = 0;  ///< layer keys in them
        std::uint64_t refund_failures = 0;  ///< refunds that failed: quota held until it expires
    };
    const tally& counts() const;
    tally& counts();

    struct impl;

  private:
    std::shared_ptr<impl> impl_;
};

}  // namespace rategate::limiters::redis
