// One Redis connection per event loop (no lock on the request path), driving the sans-I/O
// multiplexer over Asio: auto-corked pipelined writes, FIFO replies, per-call deadlines, a
// watchdog for a stalled server, idle PING, AUTH/SELECT, SCRIPT LOAD and ROLE on every connect,
// reconnect with capped exponential backoff and jitter, EVALSHA with transparent NOSCRIPT retry.
// With Sentinel, every connect first asks the sentinels for the master
// (SENTINEL get-master-addr-by-name; one that does not answer within command_timeout is
// skipped), and a subscription to +switch-master on one sentinel moves the connection to a new
// master as soon as the sentinels fail over.
//
// The connection is an owning state machine, after Boost.Redis's connection:
//   connecting -> handshaking -> ready -> (connection lost) -> connecting ...
//   ready -> draining (stop()) -> closed;  any phase -> closed (close(), destructor)
// Every pending request's reply slot is owned by the connection (shared with its waiter), and
// every way out of a phase completes every pending request exactly once, with an error when
// there is no reply: connection_lost, handshake_failed, timeout, stopped.
//
// Where the parts are: connection.cpp (the call path: exec, eval, the direct write),
// connection_state.cpp (the state machine), handshake.hpp (the connect handshake, sans-I/O),
// socket_ops.hpp (resolve, connect, short exchanges), sentinel_watcher.hpp (Sentinel).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "limiters/redis/handshake.hpp"
#include "limiters/redis/multiplexer.hpp"
#include "limiters/redis/reply.hpp"

namespace rategate::limiters::redis {

/// SPEC §2 "Redis deployments": where the master is asked for, instead of a fixed address.
struct sentinel_settings {
    std::string master;  ///< the name the sentinels monitor
    std::vector<std::pair<std::string, std::uint16_t>> nodes;
    std::string username;  ///< of the sentinels (empty: none)
    std::string password;  ///< of the sentinels (empty: no AUTH)
};

struct connection_settings {
    std::string host = "127.0.0.1";  ///< unused with `sentinel`
    std::uint16_t port = 6379;
    std::optional<sentinel_settings> sentinel;  ///< set: the master comes from the sentinels
    std::string username;                       ///< ACL user (empty: AUTH with the password alone)
    std::string password;                       ///< empty: no AUTH
    int db = 0;
    std::chrono::milliseconds connect_timeout{1000};  ///< resolve + connect + handshake
    std::chrono::milliseconds command_timeout{50};    ///< per exec(): reply or timeout error
    std::chrono::milliseconds watchdog{
        1000};  ///< oldest unanswered command older than this: reconnect
    std::chrono::milliseconds ping_interval{1000};  ///< PING when nothing was written for this long
    std::chrono::milliseconds backoff_min{20};      ///< first reconnect delay (jittered)
    std::chrono::milliseconds backoff_max{2000};    ///< reconnect delay cap
    std::size_t max_pending = 65536;  ///< beyond this, exec() fails with too_many_pending
    /// The server must be a master (ROLE on connect and on re-checks). False for a connection
    /// that only reads cluster metadata, which any node answers.
    bool require_master = true;
};

/// The outcome of one command: a transport error, or a reply (which may be an error reply).
struct result {
    std::error_code ec;
    reply value;
};

class connection {
  public:
    enum class health { connected, degraded, down };
    /// Where the state machine stands (see the top of this file).
    enum class phase { idle, connecting, handshaking, ready, draining, closed };

    connection(boost::asio::any_io_executor ex, connection_settings settings,
               std::vector<script> scripts = {});
    ~connection();  ///< close(): pending calls fail with `stopped`
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    /// Starts connecting (and reconnecting) in the background on the executor.
    void start();
    /// Graceful stop: new calls fail with `stopped`; calls already sent still get their replies
    /// (each within its command_timeout), then the connection closes. Call it on the
    /// executor's thread, or while the executor does not run.
    void stop();
    /// Immediate stop: every pending call completes at once with `stopped` (its waiter resumes
    /// through the executor) and the socket closes. Same threading rule as stop().
    void close();

    /// Sends one encoded command (see encode_command). Completes with the reply, or with
    /// not_connected / too_many_pending at once, timeout after command_timeout,
    /// connection_lost, stopped, server_unavailable (a READONLY, LOADING, MASTERDOWN,
    /// CLUSTERDOWN, OOM or BUSY reply, kept in `value`; the connection re-checks the server),
    /// or std::errc::operation_canceled when the awaiting coroutine is cancelled (the command
    /// may still run on the server; its reply is dropped).
    boost::asio::awaitable<result> exec(std::string encoded);
    /// As exec(), for `encoded` holding `replies` commands sent together (none can come
    /// between them): completes with the last one's reply.
    boost::asio::awaitable<result> exec(std::string encoded, std::size_t replies);

    /// EVALSHA of script `index` (order given at construction); a NOSCRIPT reply is retried
    /// once as EVAL, transparently, and counted in noscript_retries().
    /// `asking`: ASKING goes first, in the same write (Redis Cluster, an ASK redirection).
    boost::asio::awaitable<result> eval(std::size_t index,
                                        const std::vector<std::string_view>& keys,
                                        const std::vector<std::string_view>& args,
                                        bool asking = false);

    /// Readiness without polling: completes with true once the connection is ready (a
    /// handshake completed), with false once it stops (draining, closed) or at `deadline`; at
    /// once when one of these holds already. Failed connect attempts meanwhile are waited
    /// through. Call it on the executor's thread; the connection may be destroyed meanwhile
    /// (the wait then ends with false).
    boost::asio::awaitable<bool> wait_up(std::chrono::steady_clock::time_point deadline);
    /// Completes at the next change (a new phase, or a connect attempt that failed: last_error()
    /// names it) with true, or at `deadline` with false. For callers that stop waiting on a
    /// failed attempt too (a cluster's new node), or that publish every change.
    boost::asio::awaitable<bool> wait_change(std::chrono::steady_clock::time_point deadline);
    /// Calls `hook` synchronously, on the executor's thread, at every change that ends a
    /// wait_change() (replacing an earlier hook; empty: none). The hook must not call into the
    /// connection or destroy it; it may run inside close() and the destructor.
    void on_change(std::function<void()> hook);

    /// connected; degraded (connected, but a call timed out or Redis answered with an
    /// unavailable error in the last second); down.
    health state() const;
    /// The state machine's phase.
    phase current_phase() const;
    /// The last connection or handshake error, for logs ("" when none).
    std::string last_error() const;
    /// The server connected to or last tried, "host:port" (with Sentinel: the master it named).
    std::string address() const;
    /// How many times the connection became ready (a handshake completed): a new value means
    /// the server may have changed or restarted since (failover, restart).
    std::uint64_t generation() const;

    struct counters {
        std::uint64_t commands = 0;  ///< exec() calls
        std::uint64_t errors = 0;    ///< calls that ended with a transport error
        std::uint64_t timeouts = 0;
        std::uint64_t reconnects = 0;        ///< successful connects after the first
        std::uint64_t noscript_retries = 0;  ///< NOSCRIPT replies answered by EVAL
        std::uint64_t writes = 0;            ///< socket writes
        std::uint64_t commands_written = 0;  ///< commands in those writes
        std::uint64_t unavailable = 0;       ///< calls failed with server_unavailable
        std::uint64_t rechecks = 0;          ///< ROLE re-checks after such a reply
    };
    counters stats() const;

    struct impl;

  private:
    std::shared_ptr<impl> impl_;
};

}  // namespace rategate::limiters::redis
