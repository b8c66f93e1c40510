// The owning state of one Redis connection (connection.hpp's impl) and its state machine:
//   connecting -> handshaking -> ready -> (connection lost) -> connecting ...
//   ready -> draining (stop()) -> closed;  any phase -> closed (close(), destructor)
// The state machine (run, connect, handshake, reader, writer, watchdog, the ROLE re-check,
// readiness waits) is connection_state.cpp; the call path (exec, the direct write) is
// connection.cpp. Internal to limiters/redis/: include connection.hpp instead.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "limiters/redis/connection.hpp"
#include "limiters/redis/endpoint.hpp"
#include "limiters/redis/handshake.hpp"
#include "limiters/redis/multiplexer.hpp"
#include "limiters/redis/sentinel_watcher.hpp"

namespace rategate::limiters::redis {

struct connection::impl : std::enable_shared_from_this<impl> {
    using time_point = std::chrono::steady_clock::time_point;

    impl(boost::asio::any_io_executor ex, connection_settings s, std::vector<script> sc);

    boost::asio::any_io_executor executor;
    connection_settings settings;
    std::vector<script> scripts;
    boost::asio::ip::tcp::socket socket;
    boost::asio::steady_timer wake;     ///< the writer sleeps on it; cancel() wakes it
    boost::asio::steady_timer retry;    ///< reconnect backoff
    multiplexer mux;                    ///< owns every pending request's reply slot
    boost::asio::steady_timer changed;  ///< never expires: wait_change() waits on it
    std::function<void()> change_hook;
    std::uint64_t changes = 0;  ///< notify_change() calls
    std::vector<std::string> shas;
    endpoint target;  ///< the server connected to (Sentinel: its master)
    phase state = phase::idle;
    std::optional<sentinel_watcher> sentinels;  ///< with Sentinel settings; reads `state`
    bool ever_connected = false;
    time_point connect_deadline{};  ///< resolve + connect + handshake
    time_point last_write{};
    time_point last_trouble{};            ///< last timeout or unavailable reply (health: degraded)
    std::shared_ptr<reply_slot> recheck;  ///< the ROLE probe after an unavailable reply
    std::string last_error;
    counters stats;
    std::vector<char> read_buffer = std::vector<char>(64 * 1024);
    std::minstd_rand rng{std::random_device{}()};
    std::string carry;           ///< what the socket did not take of a direct write
    bool writer_parked = false;  ///< the writer sleeps on `wake`, with no write of its own

    // The call path (connection.cpp).
    void wake_writer();

    // A change for wait_change() and the hook: a new phase, or a failed connect attempt.
    void notify_change() {
        ++changes;
        changed.cancel();
        if (change_hook) change_hook();
    }
    void enter(phase p) {
        if (state == p) return;
        state = p;
        notify_change();
    }
    std::string where() const { return target.host + ":" + std::to_string(target.port); }

    // The state machine (connection_state.cpp).
    void lose_connection(std::error_code ec);
    void begin_drain();
    void close_now();
    void follow_failover(const endpoint& to);
    boost::asio::awaitable<void> run();
    boost::asio::awaitable<std::error_code> connect();
    boost::asio::awaitable<std::error_code> handshake();
    boost::asio::awaitable<std::error_code> handshake_round(
        const std::vector<handshake_step>& steps, std::vector<std::shared_ptr<reply_slot>>& slots,
        std::vector<std::string>& loaded);
    void start_recheck(const std::string& what);
    bool recheck_says_reconnect();
    boost::asio::awaitable<void> reader();
    boost::asio::awaitable<void> writer();
    boost::asio::awaitable<void> watchdog();
    boost::asio::awaitable<void> watch_sentinels();
    boost::asio::awaitable<bool> wait_change(time_point deadline);
    boost::asio::awaitable<bool> wait_up(time_point deadline);
};

}  // namespace rategate::limiters::redis
