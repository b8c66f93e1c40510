// Sans-I/O Redis request multiplexer, after Boost.Redis's detail/multiplexer: callers push
// encoded commands; prepare_write() coalesces everything waiting into one buffer for one socket
// write; replies are matched to requests in FIFO order. A request abandoned after it was written
// keeps its place, so its reply is read and dropped and alignment holds. Sinks are shared with
// the multiplexer: it never points into a caller's stack or coroutine frame.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

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
    server_unavailable,   ///< READONLY/LOADING/MASTERDOWN/CLUSTERDOWN/OOM/BUSY reply: re-checking
};
const std::error_category& client_category();
std::error_code make_error_code(client_error e);

/// Receives the outcome of requests. The multiplexer holds a shared reference to the sink of
/// every request it has not completed yet, so a waiter that went away (a coroutine frame that
/// was destroyed, a caller that gave up) never leaves a dangling target behind: the request is
/// still completed, into a sink that is still alive. Each request completes exactly once.
class reply_sink {
  public:
    virtual ~reply_sink() = default;
    virtual void on_reply(std::error_code ec, reply&& r) = 0;
};
using sink_ptr = std::shared_ptr<reply_sink>;

/// A sink for one request that keeps its outcome by value. The first completion wins; later
/// ones (there are none from the multiplexer) are ignored. notify() runs once, after the
/// outcome is stored: override it to wake a waiter.
class reply_slot : public reply_sink {
  public:
    void on_reply(std::error_code ec, reply&& r) final;
    bool done() const { return done_; }
    std::error_code error() const { return ec_; }
    reply& value() { return value_; }

  protected:
    virtual void notify() {}

  private:
    bool done_ = false;
    std::error_code ec_;
    reply value_;
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
    /// once `deadline` has passed, or the error of fail_all(). The multiplexer shares ownership
    /// of the sink until it completed the request. Returns a handle for abandon().
    handle push(std::string encoded, sink_ptr sink, std::size_t replies = 1,
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

    /// Forgets the sink of a request (timed out or cancelled) without completing it. Not yet
    /// written: removed; written: stays in the FIFO and its reply is read and dropped. Returns
    /// false when the request was already completed (or never existed).
    bool abandon(handle h);

    /// Completes every request whose deadline is before `now` with client_error::timeout and
    /// abandons it (a written one keeps its FIFO place). Returns how many expired.
    std::size_t expire(clock::time_point now);

    /// Completes every pending request with `ec` and resets the parser (connection lost,
    /// handshake failed, stopped). The write buffer stays valid for a write still in progress.
    void fail_all(std::error_code ec);

    /// The first READONLY, LOADING, MASTERDOWN, CLUSTERDOWN, OOM or BUSY error reply read since
    /// the last call (abandoned requests' replies included), or "" when there was none.
    std::string take_unavailable() { return std::exchange(unavailable_, std::string()); }

    std::size_t pending() const { return waiting_.size() + in_flight_.size(); }
    /// Commands written (or being written) and not yet answered.
    std::size_t in_flight() const { return in_flight_.size(); }
    /// When the oldest written and unanswered command was written.
    std::optional<clock::time_point> oldest_written() const;

    // Counters for metrics and tests.
    std::uint64_t writes() const { return writes_; }
    std::uint64_t commands_written() const { return commands_written_; }

  private:
    struct entry {
        handle id;
        sink_ptr sink;
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
    std::size_t staged_ = 0;          ///< entries at the back of in_flight_ in the current write
    std::size_t write_commands_ = 0;  ///< commands in the current write (for the counters)
    handle next_ = 1;
    redisReader* reader_ = nullptr;
    std::uint64_t writes_ = 0;
    std::uint64_t commands_written_ = 0;
    std::string unavailable_;
};

}  // namespace rategate::limiters::redis

template <>
struct std::is_error_code_enum<rategate::limiters::redis::client_error> : std::true_type {};
