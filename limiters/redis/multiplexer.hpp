// Sans-I/O Redis request multiplexer, after Boost.Redis's detail/multiplexer: callers push
// encoded commands; prepare_write() coalesces everything waiting into one buffer for one socket
// write; replies are matched to requests in FIFO order. A request abandoned after it was written
// keeps its place, so its reply is read and dropped and alignment holds.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "limiters/redis/reply.hpp"

struct redisReader;

namespace rategate::limiters::redis {

/// Errors of the Redis client (category "rategate.redis").
enum class client_error {
    connection_lost = 1,  ///< the connection dropped with the request pending
    not_connected,        ///< no connection to Redis at the time of the call
    timeout,              ///< no reply within command_timeout
    too_many_pending,     ///< the pending-command cap was reached: failed immediately
    protocol_error,       ///< unparseable bytes, or a reply nobody asked for
    handshake_failed,     ///< AUTH, SELECT or SCRIPT LOAD refused (see the connection's last_error)
    stopped,              ///< the client is shutting down
};
const std::error_category& client_category();
std::error_code make_error_code(client_error e);

/// Receives the outcome of one request, exactly once (unless abandoned first).
class reply_sink {
  public:
    virtual void on_reply(std::error_code ec, reply&& r) = 0;

  protected:
    ~reply_sink() = default;
};

class multiplexer {
  public:
    using clock = std::chrono::steady_clock;
    using handle = std::uint64_t;

    multiplexer();
    ~multiplexer();
    multiplexer(const multiplexer&) = delete;
    multiplexer& operator=(const multiplexer&) = delete;

    /// Queues one or more already encoded commands that expect `replies` replies in total;
    /// `sink` (may be null: fire and forget) gets the last reply, or `timeout` from expire()
    /// once `deadline` has passed. Returns a handle for abandon().
    handle push(std::string encoded, reply_sink* sink, std::size_t replies = 1,
                clock::time_point deadline = clock::time_point::max());

    /// True when commands wait for a write.
    bool has_waiting() const { return !waiting_.empty(); }

    /// Moves every waiting command into one buffer (valid until the next call) and marks them
    /// written-in-progress. Call commit_write() once the socket write completed.
    std::string_view prepare_write();
    void commit_write(clock::time_point now);

    /// Feeds bytes read from the socket; completes requests in FIFO order. Returns
    /// protocol_error for unparseable input or a reply with no request waiting for it; the
    /// caller must then drop the connection (and fail_all).
    std::error_code consume(const char* data, std::size_t n);

    /// Forgets the sink of a request (timed out or cancelled). Not yet written: removed;
    /// written: stays in the FIFO and its reply is discarded.
    void abandon(handle h);

    /// Completes every request whose deadline is before `now` with client_error::timeout and
    /// abandons it (a written one keeps its FIFO place). Returns how many expired.
    std::size_t expire(clock::time_point now);

    /// Completes every pending request with `ec` and resets the parser (connection lost).
    void fail_all(std::error_code ec);

    std::size_t pending() const { return waiting_.size() + in_flight_.size(); }
    /// When the oldest written and unanswered command was written.
    std::optional<clock::time_point> oldest_written() const;

    // Counters for metrics and tests.
    std::uint64_t writes() const { return writes_; }
    std::uint64_t commands_written() const { return commands_written_; }

  private:
    struct entry {
        handle id;
        reply_sink* sink;
        std::size_t replies;  ///< replies still expected
        std::string payload;  ///< only while waiting
        clock::time_point written_at{};
        clock::time_point deadline = clock::time_point::max();
        bool written = false;
    };
    void reset_reader();

    std::deque<entry> waiting_;
    std::deque<entry> in_flight_;
    std::string write_buffer_;
    std::size_t staged_ = 0;  ///< entries at the back of in_flight_ in the current write
    handle next_ = 1;
    redisReader* reader_ = nullptr;
    std::uint64_t writes_ = 0;
    std::uint64_t commands_written_ = 0;
};

}  // namespace rategate::limiters::redis

template <>
struct std::is_error_code_enum<rategate::limiters::redis::client_error> : std::true_type {};
