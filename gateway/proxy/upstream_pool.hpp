// Per-thread keep-alive connection pools of one upstream (SPEC §3): round robin across
// targets, connect timeout, stale-connection detection. Owned by one event loop: no locks.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <memory>
#include <vector>

#include "config/config.hpp"
#include "gateway/http/response_head.hpp"
#include "gateway/runtime/deadline.hpp"

namespace rategate::gateway::http2 {
class client_connection;
}  // namespace rategate::gateway::http2

namespace rategate::gateway {

/// One connection to an upstream target with its read buffer.
struct upstream_connection {
    upstream_connection(boost::asio::any_io_executor ex, deadline_sweeper& sweeper)
        : io(boost::asio::ip::tcp::socket(ex), sweeper) {}
    timed_socket io;
    boost::beast::flat_buffer buffer;
    std::size_t target = 0;
    bool reused = false;                      ///< came from the idle pool (may be stale)
    std::string request_head, response_head;  ///< serialized heads, storage reused per exchange
    h1::response_head head;                   ///< the upstream's last response head, parsed
    /// While pooled: the id of the readiness wait that takes it out of the pool when bytes or
    /// a close arrive (unique per pool, so a late wait never takes a later pooling's place).
    std::uint64_t watch = 0;
};

class upstream_pool {
  public:
    upstream_pool(boost::asio::any_io_executor ex, deadline_sweeper& sweeper,
                  const config::upstream_config& cfg);
    ~upstream_pool();

    const config::upstream_config& settings() const { return cfg_; }

    /// "host:port" of target `i`.
    const std::string& target_name(std::size_t i) const { return targets_[i].name; }

    /// The next target index, round robin.
    std::size_t next_target();

    /// An idle keep-alive connection to `target` if a live one is pooled, else a new one
    /// (resolve + connect, and with `tls` the TLS handshake with SNI and certificate and
    /// host-name verification, within `connect_timeout`, and by `by` when that is sooner).
    /// Errors: resolve/connect/handshake failure, net::error::timed_out.
    boost::asio::awaitable<std::unique_ptr<upstream_connection>> acquire(
        std::size_t target, boost::system::error_code& ec, bool allow_reuse = true,
        std::chrono::steady_clock::time_point by = std::chrono::steady_clock::time_point::max());

    /// acquire()'s first step, with no waiting: a live idle connection to `target`, or null.
    std::unique_ptr<upstream_connection> take_idle(std::size_t target);

    /// HTTP/2 (`protocol` "h2" or "h2c"): a connection to `target` that can take another
    /// stream, opened (as acquire() opens one, with ALPN "h2" under TLS: a target that picks
    /// anything else fails with no_protocol_option) when none can. One connection per target
    /// and event loop until the upstream's SETTINGS_MAX_CONCURRENT_STREAMS, then another.
    /// `max_header_bytes` bounds a response head. Opening, or waiting for another request
    /// of the loop to open one, takes at most `connect_timeout` and ends by `by` (a request's
    /// deadline, e.g. gRPC's) when that is sooner; requests that waited on an opening that
    /// failed get its error at once (they do not each try again in turn).
    boost::asio::awaitable<std::shared_ptr<http2::client_connection>> acquire_h2(
        std::size_t target, boost::system::error_code& ec, std::size_t max_header_bytes,
        std::chrono::steady_clock::time_point by = std::chrono::steady_clock::time_point::max());

    /// Returns a connection whose last exchange completed cleanly to the idle pool (or closes
    /// it when the pool is full or holds unread bytes). A pooled connection is watched: bytes
    /// or a close arriving while it is idle (a sloppy upstream's extra bytes, its keep-alive
    /// timeout) take it out at once, so no request reads them as its response (nginx's
    /// keep-alive cache does the same). The watch is a readiness wait: Asio re-arms the socket
    /// for it (one epoll_ctl, which also reports bytes that came before), and it stays queued
    /// when the connection is taken, so the response's read queues behind it with no read
    /// tried first.
    void release(std::unique_ptr<upstream_connection> c);

    /// Closes every idle connection (HTTP/2 ones once their streams end).
    void close_idle();

    std::size_t idle_count() const;

  private:
    struct target_state {
        config::host_port address;
        std::string name;
        std::vector<boost::asio::ip::tcp::endpoint>
            endpoints;  ///< resolved once, refreshed on failure
        std::vector<std::unique_ptr<upstream_connection>> idle;
        std::vector<std::shared_ptr<http2::client_connection>> h2;  ///< "h2"/"h2c" only
        bool h2_connecting = false;  ///< a request of this loop is opening one
        /// Those waiting for it, each on its own timer set to its deadline: the opener cancels
        /// them all when it is done, with the outcome in h2_opened / h2_failure.
        std::vector<boost::asio::steady_timer*> h2_waiters;
        std::uint64_t h2_opened = 0;           ///< openings ended, successful or not
        boost::system::error_code h2_failure;  ///< how the last opening ended
    };
    boost::asio::any_io_executor ex_;
    deadline_sweeper& sweeper_;
    config::upstream_config cfg_;
    std::shared_ptr<boost::asio::ssl::context> tls_;  ///< set for an upstream with `tls`
    std::vector<target_state> targets_;
    std::size_t next_ = 0;
    std::uint64_t watches_ = 0;  ///< the last watch id given
    std::shared_ptr<char> life_ =
        std::make_shared<char>();  ///< watches outliving the pool see it gone
};

}  // namespace rategate::gateway
