// Redis Sentinel for one connection: asks the sentinels for the master before each connect
// (SENTINEL get-master-addr-by-name, the one that answered last first), and keeps a
// subscription to +switch-master on one sentinel, so that a failover moves the connection at
// once rather than at its next error. The replies are parsed in sentinel.cpp (sans-I/O).
// Owned by the connection's state (connection_state.hpp), whose phase it reads to know when to end.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <system_error>

#include "limiters/redis/connection.hpp"
#include "limiters/redis/endpoint.hpp"

namespace rategate::limiters::redis {

class sentinel_watcher {
  public:
    /// `settings.sentinel` must be set. `state` is the owning connection's phase (read, never
    /// written); `on_switch` is called with the new master when the sentinels fail over ours.
    /// Both must outlive the watcher.
    sentinel_watcher(boost::asio::any_io_executor ex, const connection_settings& settings,
                     const connection::phase& state,
                     std::function<void(const endpoint&)> on_switch);

    /// Asks the sentinels in turn (each within command_timeout) for the master's address.
    /// Sets `master` and returns no error on the first answer. Errors: not_connected, with
    /// `why` naming every sentinel tried and its answer; stopped when the connection left
    /// `connecting` meanwhile.
    boost::asio::awaitable<std::error_code> discover(endpoint& master, std::string& why);

    /// The +switch-master subscription, on one sentinel at a time (the next when it goes away,
    /// refuses, or stays silent: the subscription must be confirmed, and a PING answered, within
    /// connect_timeout; it is pinged after ping_interval without traffic), with backoff between
    /// sentinels. Returns when the connection is draining or closed. Keep the owner alive.
    boost::asio::awaitable<void> watch();

    /// Closes both sockets and cancels the retry timer: discover() and watch() end at their next
    /// step.
    void close();

  private:
    bool ending() const;
    std::string auth_command() const;
    boost::asio::awaitable<void> subscribed(std::chrono::milliseconds& backoff);

    boost::asio::any_io_executor executor_;
    const connection_settings& settings_;
    const connection::phase& state_;
    std::function<void(const endpoint&)> on_switch_;
    boost::asio::ip::tcp::socket ask_socket_;  ///< asking a sentinel for the master
    boost::asio::ip::tcp::socket sub_socket_;  ///< the +switch-master subscription
    boost::asio::steady_timer sub_retry_;
    std::size_t preferred_ = 0;  ///< the sentinel that answered last
    std::minstd_rand rng_{std::random_device{}()};
};

}  // namespace rategate::limiters::redis
