// Internals of gateway/http2/: the listener's HTTP/2 connection (connection.cpp: nghttp2's
// session, its callbacks, responses, the writer, the connection's life) and its streams
// (stream_forward.cpp: each stream admitted and forwarded to an HTTP/1.1 or HTTP/2 upstream).
// Included by those two files only.
#pragma once

#include <nghttp2/nghttp2.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cctype>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "gateway/http2/client.hpp"
#include "gateway/http2/flood_guard.hpp"
#include "gateway/http2/request_head.hpp"
#include "gateway/identity/client_ip.hpp"
#include "gateway/proxy/admission.hpp"
#include "gateway/runtime/deadline.hpp"
#include "gateway/runtime/worker.hpp"

namespace rategate::gateway::http2::detail {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using error_code = boost::system::error_code;
using std::chrono::milliseconds;

inline constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);
inline constexpr milliseconds forever{std::chrono::hours(24 * 365)};

// One stream: its request as it arrives, its response as it leaves. Shared by the
// connection's map (while nghttp2 knows the stream) and the stream's coroutine.
struct stream {
    stream(std::int32_t id, std::size_t max_header_bytes, const net::any_io_executor& ex)
        : id(id), head(max_header_bytes), wake(ex), wake_in(ex) {}
    std::int32_t id;
    request_head_builder head;
    bool in_trailers = false;           // a HEADERS block after the request's
    bool refused = false;               // reset by us (malformed: no coroutine), or answered
                                        // with the rest of its request unwanted
    bool running = false;               // its coroutine runs: it counts as admitted until that ends
    bool response_ended = false;        // our END_STREAM went out
    bool reset_after_response = false;  // RST_STREAM NO_ERROR once our END_STREAM went out
    bool over_cap = false;              // refused with REFUSED_STREAM: never counted as admitted
    bool end_of_request = false;        // END_STREAM received
    bool closed = false;                // nghttp2 closed the stream (done or reset)
    bool wants_body = true;             // DATA is kept for the upstream (else consumed at once)
    request_head_builder::head_status head_status = request_head_builder::head_status::ok;
    std::uint64_t body_received = 0;
    std::string body_in;  // DATA received, not yet forwarded nor consumed
    // The response body nghttp2 pulls through the data provider.
    std::string out;
    std::size_t out_pos = 0;
    bool out_eof = false;
    bool deferred = false;  // the data provider returned NGHTTP2_ERR_DEFERRED
    // Trailer fields to end the response with (an HTTP/2 upstream's, gRPC's status): sent
    // once the body is out (RFC 9113 §8.1).
    std::vector<std::pair<std::string, std::string>> trailers;
    wake_signal wake;
    // The request side's own wake-up while a pump forwards the body beside the response
    // (an HTTP/2 upstream: bidirectional streaming). Two waiters never share one signal.
    wake_signal wake_in;
    bool pumping = false;         // a pump owns body_in: a response does not end the request
    bool body_too_large = false;  // the pump saw more than max_body_bytes
    upstream_connection* upstream = nullptr;  // closed when the client resets the stream
    client_stream* h2_upstream = nullptr;     // cancelled when the client resets the stream
};

class connection {
  public:
    connection(worker& w, timed_socket& client, const std::string& peer)
        : w_(w),
          client_(client),
          peer_(peer),
          peer_ip_(identity::canonical_ip(peer).value_or(std::string())),
          rt_(w.rt),
          guard_(rt_->cfg->http2.max_resets_per_second),
          ex_(client.get_executor()),
          wake_writer_(ex_),
          coroutine_ended_(ex_) {}
    ~connection() {
        if (session_) nghttp2_session_del(session_);
    }

    net::awaitable<void> run(std::string_view preread);

  private:
    // nghttp2 callbacks (user_data is the connection).
    static int on_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* self);
    static int on_begin_headers(nghttp2_session*, const nghttp2_frame* f, void* self);
    static int on_header(nghttp2_session*, const nghttp2_frame* f, const std::uint8_t* name,
                         std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                         std::uint8_t flags, void* self);
    static int on_frame_recv(nghttp2_session*, const nghttp2_frame* f, void* self);
    static int on_data_chunk(nghttp2_session*, std::uint8_t flags, std::int32_t id,
                             const std::uint8_t* data, std::size_t len, void* self);
    static int on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t code, void* self);
    static int on_frame_send(nghttp2_session*, const nghttp2_frame* f, void* self);
    static ssize_t read_body(nghttp2_session*, std::int32_t id, std::uint8_t* buf,
                             std::size_t length, std::uint32_t* flags, nghttp2_data_source* src,
                             void* self);

    stream* find(std::int32_t id) {
        auto it = streams_.find(id);
        return it == streams_.end() ? nullptr : it->second.get();
    }
    void reset(stream& s, std::uint32_t code) {
        s.refused = true;
        nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id, code);
        wake_writer_.notify();
        // A reset the client provoked (a malformed stream) counts as one of its own: else
        // they would step around the rapid-reset bound ("MadeYouReset", CVE-2025-8671).
        if (code == NGHTTP2_PROTOCOL_ERROR &&
            guard_.exceeded(flood_guard::kind::reset, std::chrono::steady_clock::now()))
            calm_down();
    }
    void calm_down() {
        if (calm_) return;
        calm_ = true;
        rt_->metrics->http2_calm.add();
        nghttp2_session_terminate_session(session_, NGHTTP2_ENHANCE_YOUR_CALM);
        wake_writer_.notify();
    }
    void consume(stream* s, std::size_t n) {
        if (n == 0 || dead_) return;
        if (!s || nghttp2_session_consume(session_, s->id, n) != 0)
            nghttp2_session_consume_connection(session_, n);
        wake_writer_.notify();
    }
    // The socket's one deadline, from the connection's state: a write in progress must
    // progress within idle_timeout; a header block must end within header_timeout of its
    // start; with no stream open, the connection may idle for idle_timeout.
    void arm_deadline() {
        const auto& limits = rt_->cfg->limits;
        if (writing_) {
            client_.timer.expires_after(limits.idle_timeout);
        } else if (header_block_since_) {
            auto left = std::chrono::duration_cast<milliseconds>(
                *header_block_since_ + limits.header_timeout - std::chrono::steady_clock::now());
            client_.timer.expires_after(std::max(left, milliseconds(1)));
        } else if (open_streams_ == 0) {
            client_.timer.expires_after(limits.idle_timeout);
        } else {
            client_.timer.expires_never();
        }
    }

    // Writes the stream cap into the empty SETTINGS frame nghttp2 sends second (run()).
    void advertise_stream_cap(std::string& out);
    net::awaitable<void> writer();
    net::awaitable<void> run_stream(std::shared_ptr<stream> s);
    // The stream's request: admitted and forwarded, or refused (run_stream's body).
    net::awaitable<void> answer_stream(stream& s);
    // After a complete response to a request the client has not finished: RST_STREAM
    // NO_ERROR (RFC 9113 §8.1), so that a stream answered by the gateway (a 404, a 429) is not
    // left open with no deadline; a response body stuck behind a zero window is reset after
    // idle_timeout (drain_out).
    net::awaitable<void> end_unfinished_request(stream& s);
    enum class send_result { sent, write_failed, too_large, stream_gone };
    // Sends the request's head and body (as DATA arrives) to the upstream.
    net::awaitable<send_result> send_request(stream& s, upstream_connection& up,
                                             const http::request_header<>& req, bool chunked,
                                             milliseconds timeout, request_scope& scope);
    // forward()'s path to an upstream whose protocol is "h2" or "h2c": the stream goes on as
    // a stream of a pooled upstream HTTP/2 connection, trailers and all (gRPC).
    // Forwards the request body of `sp` to `up` as it arrives, beside the response.
    net::awaitable<void> pump_body(std::shared_ptr<stream> sp, std::shared_ptr<client_stream> up,
                                   std::uint64_t max_body, milliseconds idle,
                                   milliseconds write_timeout);
    net::awaitable<void> forward_to_h2(stream& s, runtime& rt, const config::route_config& route,
                                       const rate_headers* rate, bool grpc, request_scope& scope,
                                       bool has_body);
    net::awaitable<void> forward(stream& s, runtime& rt, const config::route_config& route,
                                 const rate_headers* rate, bool grpc, request_scope& scope);
    // Submits a response head on stream `s` with its body, or its first piece (`eof` false:
    // the rest follows through s.out), or none.
    void respond(stream& s, unsigned status, const http::fields& fields, std::string body,
                 bool has_body, bool eof = true);
    // A response the gateway made itself: as it is, or for gRPC as trailers-only.
    void respond_refusal(stream& s, http::response<http::string_body>& res, bool grpc, bool limited,
                         bool head);
    // The gateway's own error response (SPEC §3's JSON, for gRPC trailers-only) on stream `s`,
    // its status counted in `scope`; with the rate-limit headers `rate` (in `style`) of a
    // request that went through limiters.
    void refuse_with_error(stream& s, request_scope& scope, bool grpc, bool head, unsigned status,
                           std::string_view code, std::string_view message,
                           const rate_headers* rate = nullptr,
                           config::header_style style = config::header_style::none);
    // Waits until the stream's response body was taken by nghttp2; false when the stream or
    // the connection ended first.
    net::awaitable<bool> drain_out(stream& s);

    worker& w_;
    timed_socket& client_;
    const std::string& peer_;
    const std::string peer_ip_;    ///< the peer as a client IP, once per connection
    std::shared_ptr<runtime> rt_;  // the connection's: new streams take w_.rt
    flood_guard guard_;
    net::any_io_executor ex_;
    nghttp2_session* session_ = nullptr;
    std::map<std::int32_t, std::shared_ptr<stream>> streams_;
    std::size_t open_streams_ = 0;      // streams nghttp2 has open
    std::size_t admitted_streams_ = 0;  // of those, the ones under max_concurrent_streams
    bool cap_advertised_ = false;       // the SETTINGS with our stream cap went out
    std::size_t coroutines_ = 0;        // stream coroutines still running
    std::optional<std::chrono::steady_clock::time_point> header_block_since_;
    bool writing_ = false, writer_done_ = false, calm_ = false, goaway_ = false;
    bool dead_ = false;        // the connection is ending: streams stop, nothing new is submitted
    bool broken_ = false;      // a write failed: nothing more goes out
    wake_signal wake_writer_;  // output to send, or the connection ends
    wake_signal coroutine_ended_;  // a stream coroutine or the writer ended (teardown waits)
};

}  // namespace rategate::gateway::http2::detail
