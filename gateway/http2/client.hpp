// HTTP/2 to an upstream (RFC 9113; SPEC §3 upstream `protocol` "h2" and "h2c"): nghttp2's
// client session fed and drained as bytes over one pooled connection (plain, or TLS whose ALPN
// picked "h2"), many streams multiplexed on it, each the exchange of one request. Owned by
// one event loop: no locks. The upstream pool (gateway/proxy/upstream_pool.cpp) opens them and
// hands out one with a free stream; gateway/proxy/forward_h2.cpp drives a stream.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http/fields.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct nghttp2_session;

namespace rategate::gateway {
struct upstream_connection;
}

namespace rategate::gateway::http2 {

class client_connection;

/// A one-shot wake-up for one coroutine on the loop: wait() sleeps until notify() or the
/// timeout. A notify() while nobody waits is not kept: a waiter checks its condition first
/// (one thread: nothing runs between the check and the wait).
class wake_signal {
  public:
    explicit wake_signal(const boost::asio::any_io_executor& ex) : timer_(ex) {}
    void notify() { timer_.cancel(); }
    /// False when `timeout` passed without a notification.
    boost::asio::awaitable<bool> wait(std::chrono::milliseconds timeout);

  private:
    boost::asio::steady_timer timer_;
};

/// One request/response exchange on an upstream HTTP/2 connection. The request head is sent
/// by client_connection::submit; the body (if any) through write(); the response is read with
/// read_head(), then read_body() until done(); trailers() holds the trailer fields (gRPC's
/// status) once done. Body bytes the caller forwarded are reported with consumed(), which
/// reopens the stream's flow-control window (RFC 9113 §5.2): a slow client holds the upstream
/// back instead of making the gateway buffer the body. Destroying an unfinished stream resets it
/// (RST_STREAM CANCEL).
class client_stream {
  public:
    client_stream(std::shared_ptr<client_connection> conn, const boost::asio::any_io_executor& ex)
        : conn_(std::move(conn)), wake_(ex), wake_write_(ex) {}
    ~client_stream();
    client_stream(const client_stream&) = delete;
    client_stream& operator=(const client_stream&) = delete;

    /// Sends `data` as request body, the last piece when `end`; returns once nghttp2 has taken
    /// every byte (flow control permitting) or false when the stream or connection failed, or
    /// `timeout` passed without progress (then error() says why).
    boost::asio::awaitable<bool> write(std::string_view data, bool end,
                                       std::chrono::milliseconds timeout);

    /// Waits for the final response head (interim 1xx heads are skipped): status() and
    /// headers() (lower-case names, pseudo-headers removed). False on reset, a lost
    /// connection, a malformed head or `timeout` (then timed_out() is true).
    boost::asio::awaitable<bool> read_head(std::chrono::milliseconds timeout);

    /// Appends the body bytes received so far (waiting up to `timeout` for some) to `out`. True
    /// with nothing appended once done(); false on failure or timeout.
    boost::asio::awaitable<bool> read_body(std::string& out, std::chrono::milliseconds timeout);

    /// The caller forwarded `n` body bytes: the upstream may send that many more.
    void consumed(std::size_t n);

    /// Ends the exchange early: RST_STREAM with CANCEL unless it is already closed.
    void cancel();

    unsigned status() const { return status_; }
    boost::beast::http::fields& headers() { return headers_; }
    const boost::beast::http::fields& trailers() const { return trailers_; }
    /// The response ended (END_STREAM) and every body byte was read.
    bool done() const { return remote_end_ && body_.empty(); }
    bool timed_out() const { return timed_out_; }
    const std::string& error() const { return error_; }
    /// The request body was refused before any of it was sent (RST_STREAM REFUSED_STREAM, or
    /// GOAWAY above the stream's id): safe to retry on another connection.
    bool refused() const { return refused_; }

  private:
    friend class client_connection;
    void fail(std::string why);

    std::shared_ptr<client_connection> conn_;
    std::int32_t id_ = -1;
    wake_signal wake_;        ///< the reader: head, body, end
    wake_signal wake_write_;  ///< the writer: request body taken
    // Request body: what write() handed over and nghttp2 has not taken yet.
    std::string out_;
    std::size_t out_pos_ = 0;
    bool out_end_ = false;
    bool deferred_ = false;  // the data provider answered NGHTTP2_ERR_DEFERRED
    // Response.
    unsigned status_ = 0;
    bool head_done_ = false;
    bool in_trailers_ = false;
    bool remote_end_ = false;
    bool closed_ = false;
    bool timed_out_ = false;
    bool refused_ = false;
    bool bad_head_ = false;
    bool cancelled_ = false;
    std::size_t head_bytes_ = 0;  ///< the head (or trailers) so far, RFC 9113 §6.5.2 measure
    std::size_t unconsumed_ = 0;  ///< body bytes received, not yet reported consumed()
    boost::beast::http::fields headers_, trailers_;
    std::string body_;
    std::string error_;
};

/// Settings of the gateway's side of an upstream HTTP/2 connection.
struct client_settings {
    std::uint32_t stream_window = 1u << 20;  ///< SETTINGS_INITIAL_WINDOW_SIZE, bytes
    /// The connection's receive window, bytes: room for every stream's window (100 × 1 MiB and
    /// more), so slow clients of some streams never stall the others; each stream's own window
    /// bounds what the gateway holds for it.
    std::uint32_t connection_window = 256u << 20;
    std::size_t max_header_bytes = 65536;  ///< a response head above it (RFC 9113 size) fails
};

/// One HTTP/2 connection to an upstream target over a connected (and, for "h2", TLS with ALPN
/// "h2") socket. start() runs its reader and writer coroutines; the connection lives while
/// they run or a stream holds it, and ends when the socket fails, the upstream sends GOAWAY
/// and its last stream ends, or close().
class client_connection : public std::enable_shared_from_this<client_connection> {
  public:
    client_connection(std::unique_ptr<upstream_connection> io, const client_settings& s);
    ~client_connection();
    client_connection(const client_connection&) = delete;
    client_connection& operator=(const client_connection&) = delete;

    /// Sends the connection preface and SETTINGS and starts reading and writing.
    void start();

    /// Waits until the upstream's first SETTINGS arrived (its stream limit is known), up to
    /// `timeout`. False when the connection failed or the time passed.
    boost::asio::awaitable<bool> wait_settings(std::chrono::milliseconds timeout);

    /// A request on a new stream: `head` is the pseudo-headers (`:method`, `:scheme`,
    /// `:authority`, `:path`) then the fields, names lower-case; `has_body` keeps the stream
    /// open for write(). Null, with `why`, when the connection cannot take a stream.
    std::shared_ptr<client_stream> submit(
        const std::vector<std::pair<std::string, std::string>>& head, bool has_body,
        std::string& why);

    /// True while it can take another stream: alive, no GOAWAY, below the upstream's
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    bool available() const;
    /// False once the upstream's SETTINGS allow no stream at all (MAX_CONCURRENT_STREAMS 0).
    bool takes_streams() const;
    bool alive() const { return !dead_; }
    std::size_t active_streams() const { return streams_.size(); }

    /// Closes the connection once no stream is open (at once when none is): GOAWAY, then the
    /// socket; it takes no new stream from then on. Used by the pool at reload and shutdown,
    /// and when stream ids run out.
    void close_when_idle();

    /// A stream waited `waited` in vain: when nothing at all arrived on the connection for
    /// that long either, the peer may be gone without a FIN, so the connection is retired
    /// (close_when_idle) rather than handed more streams to wait on. A slow handler on a live
    /// connection (a gRPC deadline) retires nothing.
    void retire_if_silent(std::chrono::milliseconds waited);

  private:
    friend class client_stream;
    boost::asio::awaitable<void> reader(std::shared_ptr<client_connection> self);
    boost::asio::awaitable<void> writer(std::shared_ptr<client_connection> self);
    void fail_all(const std::string& why);
    void shut();
    void forget(std::int32_t id, std::size_t unconsumed);
    void resume(client_stream& s);
    void consume(std::int32_t id, std::size_t n);
    void reset(std::int32_t id);

  public:
    struct callbacks;  ///< nghttp2's callbacks (client.cpp)

  private:
    client_stream* find(std::int32_t id) {
        auto it = streams_.find(id);
        return it == streams_.end() ? nullptr : it->second;
    }

    std::unique_ptr<upstream_connection> io_;
    client_settings settings_;
    nghttp2_session* session_ = nullptr;
    std::map<std::int32_t, client_stream*> streams_;  ///< the live client_stream objects
    std::uint32_t open_streams_ = 0;                  ///< streams nghttp2 has not closed
    wake_signal wake_writer_;
    wake_signal settings_ready_;
    bool dead_ = false, goaway_ = false, closing_ = false, goaway_sent_ = false;
    bool settings_received_ = false;
    std::chrono::steady_clock::time_point last_read_ = std::chrono::steady_clock::now();
    std::string dead_reason_;
};

}  // namespace rategate::gateway::http2
