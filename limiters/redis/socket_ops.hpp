// The socket steps of the Redis client, each under a deadline: resolve and connect, and a short
// request/reply exchange driven by a multiplexer (the connect handshake, the questions to
// sentinels). Plain TCP; no state of their own. Used by connection_state.cpp and
// sentinel_watcher.cpp.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "limiters/redis/endpoint.hpp"
#include "limiters/redis/multiplexer.hpp"
#include "limiters/redis/reply.hpp"

namespace rategate::limiters::redis {

/// Resolves `to` and connects `s` (replaced by a fresh socket on its executor) before
/// `deadline`, with TCP_NODELAY. Errors: timeout, not_connected (`why` says which step failed
/// and how), or stopped when `stopped` (may be empty) says so once the name is resolved.
boost::asio::awaitable<std::error_code> open_socket(boost::asio::ip::tcp::socket& s, endpoint to,
                                                    std::chrono::steady_clock::time_point deadline,
                                                    std::string& why,
                                                    std::function<bool()> stopped = {});

/// How a round trip on a socket ended.
enum class trip { done, write_failed, timed_out, closed, garbled };

/// Writes what waits in `m` on `s`, then reads into `buf` until `last` is answered, all before
/// `deadline`. The error code says why the socket closed (trip::closed). Requests still pending
/// when it ends are the caller's to fail (m.fail_all).
boost::asio::awaitable<std::pair<trip, boost::system::error_code>> round_trip(
    boost::asio::ip::tcp::socket& s, multiplexer& m, const reply_slot& last,
    std::chrono::steady_clock::time_point deadline, std::vector<char>& buf);

/// A short exchange on `s` with its own multiplexer: `commands` (encoded) in one write, one
/// reply each, all before `deadline`. nullopt (and `why`) when the server did not answer them
/// all in time, closed, or sent garbage.
boost::asio::awaitable<std::optional<std::vector<reply>>> converse(
    boost::asio::ip::tcp::socket& s, std::vector<std::string> commands,
    std::chrono::steady_clock::time_point deadline, std::string& why);

}  // namespace rategate::limiters::redis
