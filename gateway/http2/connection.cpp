#include "gateway/http2/connection.hpp"

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <cctype>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "gateway/http/error_response.hpp"
#include "gateway/http/grpc_status.hpp"
#include "gateway/http/grpc_timeout.hpp"
#include "gateway/http/http_head.hpp"
#include "gateway/http/ratelimit_headers.hpp"
#include "gateway/http/router.hpp"
#include "gateway/http2/client.hpp"
#include "gateway/http2/flood_guard.hpp"
#include "gateway/http2/request_head.hpp"
#include "gateway/proxy/admission.hpp"
#include "gateway/proxy/forward.hpp"
#include "gateway/proxy/header_rewrite.hpp"
#include "gateway/runtime/deadline.hpp"
#include "gateway/runtime/task_group.hpp"
#include "gateway/runtime/worker.hpp"

namespace rategate::gateway::http2 {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using error_code = boost::system::error_code;
using std::chrono::milliseconds;

namespace {

constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);
constexpr milliseconds forever{std::chrono::hours(24 * 365)};

std::string h2_lower(std::string_view name) {
    std::string out(name);
    for (auto& ch : out)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return out;
}

// One stream: its request as it arrives, its response as it leaves. Shared by the
// connection's map (while nghttp2 knows the stream) and the stream's coroutine.
struct stream {
    stream(std::int32_t id, std::size_t max_header_bytes, const net::any_io_executor& ex)
        : id(id), head(max_header_bytes), wake(ex), wake_in(ex) {}
    std::int32_t id;
    request_head_builder head;
    bool in_trailers = false;     // a HEADERS block after the request's
    bool refused = false;         // reset by us (malformed): no coroutine
    bool over_cap = false;        // refused with REFUSED_STREAM: never counted as admitted
    bool end_of_request = false;  // END_STREAM received
    bool closed = false;          // nghttp2 closed the stream (done or reset)
    bool wants_body = true;       // DATA is kept for the upstream (else consumed at once)
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
    // Waits until the stream's response body was taken by nghttp2; false when the stream or
    // the connection ended first.
    net::awaitable<bool> drain_out(stream& s);

    worker& w_;
    timed_socket& client_;
    const std::string& peer_;
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

// ---- nghttp2 callbacks ----

int connection::on_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* self) {
    auto& c = *static_cast<connection*>(self);
    using k = flood_guard::kind;
    std::optional<k> what;
    switch (hd->type) {
        case NGHTTP2_RST_STREAM:
            what = k::reset;
            break;
        case NGHTTP2_SETTINGS:
            if (!(hd->flags & NGHTTP2_FLAG_ACK)) what = k::settings;
            break;
        case NGHTTP2_PING:
            if (!(hd->flags & NGHTTP2_FLAG_ACK)) what = k::ping;
            break;
        case NGHTTP2_DATA:
        case NGHTTP2_HEADERS:
        case NGHTTP2_CONTINUATION:
            if (hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_STREAM)) what = k::empty_frame;
            break;
        default:
            break;
    }
    if (what && c.guard_.exceeded(*what, std::chrono::steady_clock::now())) c.calm_down();
    // header_timeout runs from a header block's first frame to its end (on_frame_recv); a
    // frame of any other type means no block is open (CONTINUATION must follow at once).
    if (hd->type == NGHTTP2_HEADERS) {
        if (!c.header_block_since_) c.header_block_since_ = std::chrono::steady_clock::now();
    } else if (hd->type != NGHTTP2_CONTINUATION) {
        c.header_block_since_.reset();
    }
    return 0;
}

int connection::on_begin_headers(nghttp2_session*, const nghttp2_frame* f, void* self) {
    auto& c = *static_cast<connection*>(self);
    if (f->hd.type != NGHTTP2_HEADERS) return 0;
    if (f->headers.cat == NGHTTP2_HCAT_REQUEST) {
        auto s =
            std::make_shared<stream>(f->hd.stream_id, c.rt_->cfg->limits.max_header_bytes, c.ex_);
        nghttp2_session_set_stream_user_data(c.session_, s->id, s.get());
        c.rt_->metrics->http2_streams.add();
        auto& st = *s;
        c.streams_.emplace(s->id, std::move(s));
        ++c.open_streams_;
        // RFC 9113 §5.1.2: a stream above the advertised cap is refused, the connection goes on.
        if (c.admitted_streams_ >= c.rt_->cfg->http2.max_concurrent_streams) {
            st.over_cap = true;
            c.reset(st, NGHTTP2_REFUSED_STREAM);
        } else {
            ++c.admitted_streams_;
        }
    } else if (auto* s = c.find(f->hd.stream_id)) {
        s->in_trailers = true;
    }
    return 0;
}

int connection::on_header(nghttp2_session*, const nghttp2_frame* f, const std::uint8_t* name,
                          std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                          std::uint8_t, void* self) {
    auto& c = *static_cast<connection*>(self);
    auto* s = c.find(f->hd.stream_id);
    if (!s || s->refused) return 0;
    std::string_view n(reinterpret_cast<const char*>(name), namelen);
    std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    if (s->in_trailers) {
        // Trailers do not go on to an HTTP/1.1 upstream; they must still be well formed.
        if (check_trailer_field(n, v)) c.reset(*s, NGHTTP2_PROTOCOL_ERROR);
        return 0;
    }
    switch (s->head.add(n, v)) {
        case request_head_builder::field_status::ok:
            break;
        case request_head_builder::field_status::malformed:
            c.reset(*s, NGHTTP2_PROTOCOL_ERROR);
            break;
        case request_head_builder::field_status::flood:
            // Four times max_header_bytes decoded: a CONTINUATION flood or an HPACK bomb.
            s->refused = true;
            c.calm_down();
            break;
    }
    return 0;
}

int connection::on_frame_recv(nghttp2_session*, const nghttp2_frame* f, void* self) {
    auto& c = *static_cast<connection*>(self);
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
    auto* s = c.find(f->hd.stream_id);
    if (f->hd.type == NGHTTP2_HEADERS) c.header_block_since_.reset();
    if (!s || s->refused) return 0;
    const bool end = f->hd.flags & NGHTTP2_FLAG_END_STREAM;
    if (f->hd.type == NGHTTP2_HEADERS && !s->in_trailers) {
        s->head_status = s->head.finish();
        if (s->head_status == request_head_builder::head_status::malformed) {
            c.reset(*s, NGHTTP2_PROTOCOL_ERROR);
            return 0;
        }
        s->end_of_request = end;
        if (end && s->head.content_length().value_or(0) != 0) {
            c.reset(*s, NGHTTP2_PROTOCOL_ERROR);  // content-length without DATA
            return 0;
        }
        ++c.coroutines_;
        auto self_ptr = c.streams_.at(s->id);
        net::co_spawn(c.ex_, c.run_stream(std::move(self_ptr)),
                      [&c, id = s->id](std::exception_ptr e) {
                          if (e) {
                              try {
                                  std::rethrow_exception(e);
                              } catch (const std::exception& ex) {
                                  spdlog::error("h2 stream {}: {}", id, ex.what());
                              }
                          }
                          --c.coroutines_;
                          c.coroutine_ended_.notify();
                      });
        return 0;
    }
    if (end) {
        // RFC 9113 §8.1.1: DATA must add up to content-length.
        if (auto cl = s->head.content_length(); cl && *cl != s->body_received) {
            c.reset(*s, NGHTTP2_PROTOCOL_ERROR);
            s->wake.notify();
            s->wake_in.notify();
            return 0;
        }
        s->end_of_request = true;
        s->wake.notify();
        s->wake_in.notify();
    }
    return 0;
}

int connection::on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t id,
                              const std::uint8_t* data, std::size_t len, void* self) {
    auto& c = *static_cast<connection*>(self);
    auto* s = c.find(id);
    if (s && !s->refused) {
        s->body_received += len;
        if (auto cl = s->head.content_length(); cl && s->body_received > *cl) {
            c.reset(*s, NGHTTP2_PROTOCOL_ERROR);
            s->wake.notify();
            s->wake_in.notify();
        }
    }
    if (!s || s->refused || !s->wants_body) {
        // Nobody forwards it: give the window back now.
        c.consume(s && !s->closed ? s : nullptr, len);
        return 0;
    }
    s->body_in.append(reinterpret_cast<const char*>(data), len);
    s->wake.notify();
    s->wake_in.notify();
    return 0;
}

int connection::on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t, void* self) {
    auto& c = *static_cast<connection*>(self);
    auto it = c.streams_.find(id);
    if (it == c.streams_.end()) return 0;
    auto& s = *it->second;
    s.closed = true;
    if (!s.body_in.empty()) {
        nghttp2_session_consume_connection(c.session_, s.body_in.size());
        s.body_in.clear();
    }
    // A reset mid-exchange: the upstream connection is abandoned (never pooled), and closed
    // now to end what the stream's coroutine awaits there. After the last DATA it stays: the
    // coroutine returns it to the pool.
    const bool response_sent = s.out_eof && s.out_pos >= s.out.size();
    if (s.upstream && !response_sent) {
        error_code ignored;
        s.upstream->io.socket.close(ignored);
    }
    if (s.h2_upstream && !response_sent) s.h2_upstream->cancel();
    s.wake.notify();
    s.wake_in.notify();
    if (!s.over_cap) --c.admitted_streams_;
    c.streams_.erase(it);  // `s` is gone from here on
    if (--c.open_streams_ == 0) c.arm_deadline();
    return 0;
}

ssize_t connection::read_body(nghttp2_session* session, std::int32_t, std::uint8_t* buf,
                              std::size_t length, std::uint32_t* flags, nghttp2_data_source* src,
                              void*) {
    auto& s = *static_cast<stream*>(src->ptr);
    auto end_body = [&] {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (s.trailers.empty()) return;
        // The body ends without END_STREAM: the trailers' HEADERS frame carries it.
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        std::vector<nghttp2_nv> nva;
        for (auto& [n, v] : s.trailers)
            nva.push_back({reinterpret_cast<std::uint8_t*>(n.data()),
                           reinterpret_cast<std::uint8_t*>(v.data()), n.size(), v.size(),
                           NGHTTP2_NV_FLAG_NONE});
        nghttp2_submit_trailer(session, s.id, nva.data(), nva.size());
    };
    std::size_t avail = s.out.size() - s.out_pos;
    if (avail == 0 && !s.out_eof) {
        s.deferred = true;
        s.wake.notify();
        return NGHTTP2_ERR_DEFERRED;
    }
    std::size_t n = std::min(avail, length);
    std::memcpy(buf, s.out.data() + s.out_pos, n);
    s.out_pos += n;
    if (s.out_pos == s.out.size()) {
        if (s.out_eof) end_body();
        s.wake.notify();  // drained: the coroutine may read on
    }
    return static_cast<ssize_t>(n);
}

// ---- responses ----

void connection::respond(stream& s, unsigned status, const http::fields& fields, std::string body,
                         bool has_body, bool eof) {
    if (s.closed || dead_) return;
    // The request gets no more of the stream's attention: its DATA is consumed as it comes
    // (unless a pump still forwards it: a streaming call answers while its request goes on).
    if (!s.pumping) {
        s.wants_body = false;
        if (!s.body_in.empty()) consume(&s, std::exchange(s.body_in, {}).size());
    }
    std::vector<std::string> storage;
    storage.reserve(2 * 32);
    std::vector<nghttp2_nv> nva;
    auto add = [&](std::string name, std::string value) {
        storage.push_back(std::move(name));
        storage.push_back(std::move(value));
    };
    add(":status", std::to_string(status));
    for (const auto& f : fields) {
        std::string name(f.name_string());
        for (auto& ch : name)
            ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        // RFC 9113 §8.2.2: connection-specific fields never go out on HTTP/2.
        if (name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
            name == "transfer-encoding" || name == "upgrade" || name == "te")
            continue;
        add(std::move(name), std::string(f.value()));
    }
    nva.reserve(storage.size() / 2);
    for (std::size_t i = 0; i < storage.size(); i += 2)
        nva.push_back({reinterpret_cast<std::uint8_t*>(storage[i].data()),
                       reinterpret_cast<std::uint8_t*>(storage[i + 1].data()), storage[i].size(),
                       storage[i + 1].size(), NGHTTP2_NV_FLAG_NONE});
    s.out = std::move(body);
    s.out_pos = 0;
    s.out_eof = eof;
    nghttp2_data_provider provider{};
    provider.source.ptr = &s;
    provider.read_callback = read_body;
    nghttp2_submit_response(session_, s.id, nva.data(), nva.size(), has_body ? &provider : nullptr);
    wake_writer_.notify();
}

void connection::respond_refusal(stream& s, http::response<http::string_body>& res, bool grpc,
                                 bool limited, bool head) {
    if (!grpc) {
        bool body = !head && !res.body().empty();
        respond(s, res.result_int(), res.base(), std::move(res.body()), body);
        return;
    }
    // SPEC §3 "gRPC": trailers-only, HTTP 200, the refusal's message and headers kept.
    std::string message;
    try {
        message = nlohmann::json::parse(res.body()).value("message", "");
    } catch (const std::exception&) {
        message = std::string(res.reason());
    }
    http::fields f;
    f.set(http::field::content_type, "application/grpc");
    f.set("grpc-status", std::to_string(grpc_status_for(res.result_int(), limited)));
    f.set("grpc-message", grpc_percent_encode(message));
    for (const auto& field : res.base())
        if (field.name() != http::field::content_type &&
            field.name() != http::field::content_length && field.name() != http::field::connection)
            f.insert(field.name_string(), field.value());
    respond(s, 200, f, {}, false);
}

net::awaitable<bool> connection::drain_out(stream& s) {
    const auto timeout = rt_->cfg->limits.idle_timeout;
    while (!s.closed && !dead_ && s.out_pos < s.out.size()) {
        // A zero window for idle_timeout (a reader that stopped) ends the stream.
        if (!co_await s.wake.wait(timeout) && !s.closed && s.out_pos < s.out.size()) {
            reset(s, NGHTTP2_CANCEL);
            co_return false;
        }
    }
    // All taken: a stream that closed because its last DATA went out ended well.
    co_return s.out_pos >= s.out.size();
}

// ---- the stream's request ----

net::awaitable<connection::send_result> connection::send_request(stream& s, upstream_connection& up,
                                                                 const http::request_header<>& req,
                                                                 bool chunked, milliseconds timeout,
                                                                 request_scope& scope) {
    // The head, then the body as DATA arrives, each piece's window given back only once the
    // upstream took it (a slow upstream slows the client, RFC 9113 §5.2).
    up.request_head.clear();
    append_request_head(up.request_head, req);
    up.io.timer.expires_after(timeout);
    auto [hec, hn] = co_await net::async_write(up.io, net::buffer(up.request_head), use_nothrow);
    if (s.closed || dead_) co_return send_result::stream_gone;
    if (hec) co_return send_result::write_failed;
    const auto& limits = rt_->cfg->limits;
    std::string piece;
    while (!s.end_of_request || !s.body_in.empty()) {
        while (s.body_in.empty() && !s.end_of_request && !s.closed && !dead_) {
            if (!co_await s.wake.wait(limits.idle_timeout) && s.body_in.empty() &&
                !s.end_of_request && !s.closed) {
                reset(s, NGHTTP2_CANCEL);  // the client stopped sending its body
                co_return send_result::stream_gone;
            }
        }
        if (s.closed || dead_ || s.refused) co_return send_result::stream_gone;
        std::size_t n = s.body_in.size();
        scope.rec.bytes_in += n;
        if (scope.rec.bytes_in > limits.max_body_bytes) co_return send_result::too_large;
        piece.clear();
        if (chunked) {
            if (n) {
                char size[20];
                auto len = std::snprintf(size, sizeof size, "%zx\r\n", n);
                piece.append(size, static_cast<std::size_t>(len));
                piece += s.body_in;
                piece += "\r\n";
            }
            if (s.end_of_request) piece += "0\r\n\r\n";
        } else {
            piece.swap(s.body_in);
        }
        s.body_in.clear();
        if (piece.empty()) continue;
        up.io.timer.expires_after(timeout);
        auto [pec, pn] = co_await net::async_write(up.io, net::buffer(piece), use_nothrow);
        // The piece's bytes are out of body_in: their connection window goes back whatever
        // happened (a reset stream's own window no longer matters; the connection's does).
        consume(&s, n);
        if (s.closed || dead_) co_return send_result::stream_gone;
        if (pec) co_return send_result::write_failed;
    }
    s.wants_body = false;
    co_return send_result::sent;
}

net::awaitable<void> connection::run_stream(std::shared_ptr<stream> sp) {
    auto& s = *sp;
    auto rt = w_.rt;  // a stream runs on the runtime in force when it starts
    request_scope scope(*rt, peer_);
    scope.protocol = request_protocol::http2;
    auto& req = s.head.head();
    const bool grpc = is_grpc_content_type(req[http::field::content_type]);
    const bool head = req.method() == http::verb::head;
    auto refuse = [&](unsigned status, std::string_view code, std::string_view message) {
        auto res = make_error_response(status, code, message, true);
        scope.rec.status = status;
        respond_refusal(s, res, grpc, false, head);
    };
    if (s.closed) co_return;
    switch (s.head_status) {
        case request_head_builder::head_status::no_authority:
            refuse(400, "bad_request", "request has neither :authority nor host");
            co_return;
        case request_head_builder::head_status::too_large:
            refuse(431, "headers_too_large", "request header block exceeds max_header_bytes");
            co_return;
        default:
            break;
    }
    const admission_input in{.peer = peer_,
                             .tls = client_.tls != nullptr,
                             .protocol = wire_protocol::http2,
                             .head = head};
    auto decided = co_await admit(*rt, req, in, scope);
    if (s.closed || dead_) co_return;
    if (decided.refusal) {
        scope.rec.status = decided.refusal->result_int();  // the decision, for gRPC too
        respond_refusal(s, *decided.refusal, grpc, decided.limited, head);
        co_return;
    }
    co_await forward(s, *rt, *decided.route, decided.rate ? &*decided.rate : nullptr, grpc, scope);
}

net::awaitable<void> connection::forward(stream& s, runtime& rt, const config::route_config& route,
                                         const rate_headers* rate, bool grpc,
                                         request_scope& scope) {
    auto& req = s.head.head();
    const auto& limits = rt.cfg->limits;
    auto& pool = rt.pool(route.upstream);
    const auto& up_cfg = pool.settings();
    const bool head = req.method() == http::verb::head;
    auto fail = [&](unsigned status, std::string_view code, std::string_view message) {
        auto res = make_error_response(status, code, message, true);
        scope.rec.status = status;
        respond_refusal(s, res, grpc, false, head);
    };
    const auto cl = s.head.content_length();
    if (cl && *cl > limits.max_body_bytes) {
        fail(413, "body_too_large", "request body exceeds max_body_bytes");
        co_return;
    }
    const bool has_body = !s.end_of_request || !s.body_in.empty();
    scope.rec.request_id = rewrite_request_headers(req, {peer_, client_.tls ? "https" : "http"});
    if (!route.strip_prefix.empty())
        req.target(strip_path_prefix(req.target(), route.strip_prefix));
    if (up_cfg.protocol != config::upstream_protocol::http1) {
        co_await forward_to_h2(s, rt, route, rate, grpc, scope, has_body);
        co_return;
    }
    req.version(11);
    // HTTP/1.1 needs framing HTTP/2 leaves to the frames (RFC 9113 §8.1).
    const bool chunked = has_body && !cl;
    if (chunked) req.set(http::field::transfer_encoding, "chunked");

    error_code ec;
    auto up = co_await pool.acquire(pool.next_target(), ec);
    if (s.closed || dead_) co_return;
    if (ec) {
        auto f = describe_connect_failure(ec, route.upstream);
        fail(f.status, f.code, f.message);
        co_return;
    }
    s.upstream = up.get();
    struct upstream_mark {
        stream& s;
        ~upstream_mark() { s.upstream = nullptr; }
    } unmark{s};
    scope.rec.upstream = pool.target_name(up->target);

    // The request, then the response head. A pooled connection found closed on a request
    // without a body is replaced once, as HTTP/1.1 does (forward.cpp).
    const auto sent_at = std::chrono::steady_clock::now();
    std::optional<http::response_parser<http::buffer_body>> rp;
    for (int attempt = 0;; ++attempt) {
        auto sent = co_await send_request(s, *up, req, chunked, up_cfg.response_timeout, scope);
        if (sent == send_result::stream_gone) co_return;
        if (sent == send_result::too_large) {
            fail(413, "body_too_large", "request body exceeds max_body_bytes");
            co_return;
        }
        error_code rec =
            sent == send_result::write_failed ? error_code(net::error::broken_pipe) : error_code();
        // Interim 1xx responses are consumed (we answer for the gateway).
        while (!rec) {
            rp.emplace();
            rp->body_limit(boost::none);
            if (head) rp->skip(true);
            up->io.timer.expires_after(up_cfg.response_timeout);
            auto [hec, rn] = co_await http::async_read_header(up->io, up->buffer, *rp, use_nothrow);
            rec = hec;
            if (rec && up->io.timer.expired()) rec = net::error::timed_out;
            if (s.closed || dead_) co_return;
            if (!rec && (rp->get().result_int() / 100 != 1 || rp->get().result_int() == 101)) break;
        }
        if (!rec && rp->get().result_int() == 101) rec = http::error::bad_version;
        if (!rec) break;
        if (attempt == 0 && up->reused && s.end_of_request && scope.rec.bytes_in == 0 &&
            is_idempotent(req.method()) && is_stale_connection_error(rec)) {
            up = co_await pool.acquire(up->target, ec, /*allow_reuse=*/false);
            if (s.closed || dead_) co_return;
            s.upstream = up.get();
            if (!ec) continue;
            rec = ec;
        }
        bool timed_out = rec == net::error::timed_out;
        std::string message =
            "upstream \"" + route.upstream + "\" " +
            (timed_out ? std::string("did not respond in time") : "failed: " + rec.message());
        fail(timed_out ? 504 : 502, timed_out ? "upstream_timeout" : "upstream_error", message);
        co_return;
    }
    scope.rec.upstream_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - sent_at)
            .count();
    auto& res = rp->get();
    const unsigned status = res.result_int();
    scope.rec.status = status;
    const bool upstream_keep_alive = res.keep_alive();
    const bool upstream_chunked = res.chunked();
    rewrite_response_headers(res, scope.rec.request_id);
    if (rate) apply_rate_headers(res, route.headers, *rate, /*keep_stricter_backend=*/true);
    // RFC 9110 §6.4.1: HEAD, 204 and 304 have no body; a chunked one loses its length.
    const bool no_body = head || status == 204 || status == 304 || rp->is_done();
    if (upstream_chunked) res.erase(http::field::content_length);
    if (no_body) {
        respond(s, status, res.base(), {}, false);
        if (upstream_keep_alive && rp->is_done() && !w_.stopping) pool.release(std::move(up));
        co_return;
    }

    // The body: one buffer at a time, the next read only once nghttp2 took the last (the
    // client's window is the upstream's back-pressure). The head goes out with the first
    // piece: a small response is one write.
    auto buffer = w_.take_buffer();
    struct buffer_return {
        worker& w;
        std::unique_ptr<char[]>& b;
        ~buffer_return() { w.give_buffer(std::move(b)); }
    } give_back{w_, buffer};
    auto& body = rp->get().body();
    bool head_sent = false;
    while (!rp->is_done()) {
        body.data = buffer.get();
        body.size = worker::relay_buffer_size;
        up->io.timer.expires_after(up_cfg.response_timeout);
        auto [bec, bn] = co_await http::async_read_some(up->io, up->buffer, *rp, use_nothrow);
        if (bec == http::error::need_buffer) bec = {};
        if (s.closed || dead_) co_return;
        if (bec && !head_sent) {
            bool timed_out = up->io.timer.expired();
            std::string message =
                "upstream \"" + route.upstream + "\" " +
                (timed_out ? std::string("did not respond in time") : "failed: " + bec.message());
            fail(timed_out ? 504 : 502, timed_out ? "upstream_timeout" : "upstream_error", message);
            co_return;
        }
        if (bec) {
            spdlog::warn("upstream {} broke mid-response: {}", route.upstream, bec.message());
            reset(s, NGHTTP2_INTERNAL_ERROR);
            co_return;
        }
        std::size_t produced = worker::relay_buffer_size - body.size;
        scope.rec.bytes_out += produced;
        if (!head_sent) {
            respond(s, status, res.base(), std::string(buffer.get(), produced), true,
                    rp->is_done());
            head_sent = true;
        } else {
            s.out.assign(buffer.get(), produced);
            s.out_pos = 0;
            s.out_eof = rp->is_done();
            if (s.deferred) {
                s.deferred = false;
                nghttp2_session_resume_data(session_, s.id);
            }
            wake_writer_.notify();
        }
        if (!co_await drain_out(s)) co_return;
    }
    if (upstream_keep_alive && !w_.stopping) pool.release(std::move(up));
}

net::awaitable<void> connection::pump_body(std::shared_ptr<stream> sp,
                                           std::shared_ptr<client_stream> up,
                                           std::uint64_t max_body, milliseconds idle,
                                           milliseconds write_timeout) {
    auto& s = *sp;
    std::uint64_t sent = 0;
    std::string piece;
    for (;;) {
        while (s.body_in.empty() && !s.end_of_request && !s.closed && !dead_) {
            bool woken = co_await s.wake_in.wait(idle);
            if (!woken && s.body_in.empty() && !s.end_of_request && !s.closed) {
                reset(s, NGHTTP2_CANCEL);  // the client stopped sending its body
                up->cancel();
                break;
            }
        }
        if (s.closed || dead_ || s.refused) break;
        piece.clear();
        piece.swap(s.body_in);
        const auto n = piece.size();
        sent += n;
        if (sent > max_body) {
            consume(&s, n);
            s.body_too_large = true;
            up->cancel();
            break;
        }
        const bool end = s.end_of_request;
        bool taken = co_await up->write(piece, end, write_timeout);
        // The piece's window goes back to the client once the upstream took it (a slow
        // upstream slows the client, RFC 9113 §5.2), and whatever happened to the stream (the
        // connection's window would leak).
        consume(&s, n);
        if (s.closed || dead_) break;
        if (!taken || end) break;
    }
    if (s.h2_upstream == up.get()) s.h2_upstream = nullptr;
    s.pumping = false;
    s.wants_body = false;
    if (!s.closed && !dead_ && !s.body_in.empty()) consume(&s, std::exchange(s.body_in, {}).size());
}

net::awaitable<void> connection::forward_to_h2(stream& s, runtime& rt,
                                               const config::route_config& route,
                                               const rate_headers* rate, bool grpc,
                                               request_scope& scope, bool has_body) {
    auto& req = s.head.head();
    const auto& limits = rt.cfg->limits;
    auto& pool = rt.pool(route.upstream);
    const auto& up_cfg = pool.settings();
    const bool head = req.method() == http::verb::head;
    auto fail = [&](unsigned status, std::string_view code, std::string_view message) {
        auto res = make_error_response(status, code, message, true);
        scope.rec.status = status;
        respond_refusal(s, res, grpc, false, head);
    };
    // SPEC §3 "gRPC": the deadline is the smaller of grpc-timeout and response_timeout, and
    // the upstream gets what is left of it.
    auto budget = std::chrono::duration_cast<std::chrono::microseconds>(up_cfg.response_timeout);
    if (grpc) {
        auto it = req.find("grpc-timeout");
        if (it != req.end())
            if (auto t = grpc::parse_timeout(it->value()); t && *t < budget) budget = *t;
    }
    const auto deadline = std::chrono::steady_clock::now() + budget;
    auto left = [&] {
        return std::max(
            std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now()),
            milliseconds(1));
    };

    auto fields =
        h2_request_head(req, up_cfg.protocol == config::upstream_protocol::h2 ? "https" : "http");
    if (grpc) {
        std::erase_if(fields,
                      [](const auto& f) { return f.first == "grpc-timeout" || f.first == "te"; });
        fields.emplace_back("te", "trailers");  // gRPC over HTTP/2 asks for it
        fields.emplace_back(
            "grpc-timeout",
            grpc::format_timeout(std::chrono::duration_cast<std::chrono::microseconds>(
                deadline - std::chrono::steady_clock::now())));
    }
    std::shared_ptr<client_stream> up;
    std::size_t target = 0;
    for (int attempt = 0; attempt < 2 && !up; ++attempt) {
        error_code ec;
        target = pool.next_target();
        auto conn = co_await pool.acquire_h2(target, ec, limits.max_header_bytes);
        if (s.closed || dead_) co_return;
        if (ec) {
            if (attempt == 0) continue;  // the next target, once
            auto f = describe_connect_failure(ec, route.upstream);
            fail(f.status, f.code, f.message);
            co_return;
        }
        std::string why;
        up = conn->submit(fields, has_body, why);
        if (!up && attempt == 1) {
            fail(502, "upstream_error", "upstream \"" + route.upstream + "\" failed: " + why);
            co_return;
        }
    }
    s.h2_upstream = up.get();
    struct upstream_mark {
        stream& s;
        ~upstream_mark() {
            if (!s.pumping) s.h2_upstream = nullptr;  // a pump still holds it: the pump clears it
        }
    } unmark{s};
    scope.rec.upstream = pool.target_name(target);
    const auto sent_at = std::chrono::steady_clock::now();

    // The request body goes on beside the response (a bidirectional streaming call answers
    // while its request stream goes on): a pump of its own, counted like a stream coroutine.
    if (has_body) {
        auto it = streams_.find(s.id);
        if (it == streams_.end()) co_return;
        s.pumping = true;
        ++coroutines_;
        const auto write_timeout = grpc ? left() : up_cfg.response_timeout;
        net::co_spawn(ex_,
                      pump_body(it->second, up, limits.max_body_bytes,
                                grpc ? write_timeout : limits.idle_timeout, write_timeout),
                      [this](std::exception_ptr) {
                          --coroutines_;
                          coroutine_ended_.notify();
                      });
    } else {
        s.wants_body = false;
    }

    bool answered = co_await up->read_head(left());
    if (s.closed || dead_) co_return;
    if (!answered && up->refused() && !has_body) {
        // REFUSED_STREAM (or past a GOAWAY): the upstream did nothing with it (RFC 9113
        // §8.7), so it goes once more, on a connection that takes it.
        error_code ec;
        auto conn = co_await pool.acquire_h2(target, ec, limits.max_header_bytes);
        if (s.closed || dead_) co_return;
        std::string why;
        if (!ec)
            if (auto again = conn->submit(fields, false, why)) {
                up = std::move(again);
                s.h2_upstream = up.get();
                answered = co_await up->read_head(left());
                if (s.closed || dead_) co_return;
            }
    }
    scope.rec.bytes_in = s.body_received;
    if (!answered && s.body_too_large) {
        fail(413, "body_too_large", "request body exceeds max_body_bytes");
        co_return;
    }
    if (!answered) {
        bool timed_out = up->timed_out();
        std::string message =
            "upstream \"" + route.upstream + "\" " +
            (timed_out ? std::string("did not respond in time") : "failed: " + up->error());
        fail(timed_out ? 504 : 502, timed_out ? "upstream_timeout" : "upstream_error", message);
        co_return;
    }
    scope.rec.upstream_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - sent_at)
            .count();
    const unsigned status = up->status();
    scope.rec.status = status;
    auto& res = up->headers();
    rewrite_response_headers(res, scope.rec.request_id);
    if (rate) apply_rate_headers(res, route.headers, *rate, /*keep_stricter_backend=*/true);
    if (up->done() && up->trailers().begin() == up->trailers().end()) {
        // Headers only (a gRPC trailers-only answer, a 204): one HEADERS frame. A head and
        // trailers with no body between go out as a head, then the trailers (below).
        respond(s, status, res, {}, false);
        co_return;
    }
    respond(s, status, res, {}, !head, /*eof=*/false);
    if (head) co_return;
    // The body piece by piece as it arrives (a server-streaming call message by message), the
    // next read only once nghttp2 took the last; then the upstream's trailers.
    for (;;) {
        std::string piece;
        bool got = co_await up->read_body(piece, grpc ? left() : up_cfg.response_timeout);
        if (s.closed || dead_) co_return;
        if (!got) {
            spdlog::warn("upstream {} broke mid-response: {}", route.upstream, up->error());
            reset(s, up->timed_out() ? NGHTTP2_CANCEL : NGHTTP2_INTERNAL_ERROR);
            co_return;
        }
        const auto n = piece.size();
        scope.rec.bytes_out += n;
        const bool last = up->done();
        if (last)
            for (const auto& f : up->trailers())
                s.trailers.emplace_back(h2_lower(f.name_string()), std::string(f.value()));
        s.out = std::move(piece);
        s.out_pos = 0;
        s.out_eof = last;
        if (s.deferred) {
            s.deferred = false;
            nghttp2_session_resume_data(session_, s.id);
        }
        wake_writer_.notify();
        bool drained = co_await drain_out(s);
        if (!drained) co_return;
        up->consumed(n);
        if (last) co_return;
    }
}

// ---- the connection ----

void connection::advertise_stream_cap(std::string& out) {
    // Frames: 3 bytes length, type, flags, 4 bytes stream id, payload (RFC 9113 §4.1).
    for (std::size_t at = 0; at + 9 <= out.size();) {
        auto byte = [&](std::size_t i) { return static_cast<unsigned char>(out[at + i]); };
        std::size_t length = (std::size_t(byte(0)) << 16) | (std::size_t(byte(1)) << 8) | byte(2);
        if (length == 0 && byte(3) == NGHTTP2_SETTINGS && byte(4) == 0) {
            const std::uint32_t cap = rt_->cfg->http2.max_concurrent_streams;
            const char frame[15] = {0,
                                    0,
                                    6,
                                    NGHTTP2_SETTINGS,
                                    0,
                                    0,
                                    0,
                                    0,
                                    0,
                                    0,
                                    NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS,
                                    static_cast<char>(cap >> 24),
                                    static_cast<char>(cap >> 16),
                                    static_cast<char>(cap >> 8),
                                    static_cast<char>(cap)};
            out.replace(at, 9, frame, sizeof frame);
            cap_advertised_ = true;
            return;
        }
        at += 9 + length;
    }
}

net::awaitable<void> connection::writer() {
    std::string out;
    for (;;) {
        out.clear();
        while (out.size() < 64 * 1024) {
            const std::uint8_t* data = nullptr;
            auto n = nghttp2_session_mem_send(session_, &data);
            if (n <= 0) break;
            out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
        }
        if (!cap_advertised_) advertise_stream_cap(out);
        if (out.empty()) {
            // Nothing more to say, and the reader is gone or nothing more is to be heard
            // (GOAWAY went out, or came in, and no stream is left): end the connection.
            if (dead_ ||
                (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_))) {
                // Our side is done; the reader is woken to end (and drain what still comes).
                error_code ignored;
                client_.socket.shutdown(net::ip::tcp::socket::shutdown_send, ignored);
                client_.socket.cancel(ignored);
                break;
            }
            co_await wake_writer_.wait(forever);
            continue;
        }
        writing_ = true;
        arm_deadline();
        auto [ec, n] = co_await net::async_write(client_, net::buffer(out), use_nothrow);
        writing_ = false;
        if (ec) {
            broken_ = true;
            error_code ignored;
            client_.socket.close(ignored);
            break;
        }
        arm_deadline();
    }
    writer_done_ = true;
    coroutine_ended_.notify();
}

net::awaitable<void> connection::run(std::string_view preread) {
    const auto& h2 = rt_->cfg->http2;
    const auto& limits = rt_->cfg->limits;
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_option* opt = nullptr;
    nghttp2_option_new(&opt);
    // The window is given back as the upstream takes the bytes, not as they arrive.
    nghttp2_option_set_no_auto_window_update(opt, 1);
    // request_head.cpp checks requests itself (SPEC's 400 for a missing :authority).
    nghttp2_option_set_no_http_messaging(opt, 1);
    int rv = nghttp2_session_server_new2(&session_, cbs, this, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    if (rv != 0) co_return;

    // SETTINGS_MAX_CONCURRENT_STREAMS is not nghttp2's to enforce: once acknowledged it makes
    // a stream over the cap a connection error, where RFC 9113 §5.1.2 and the SPEC want that
    // stream refused. nghttp2 sends an empty SETTINGS second, which the writer turns into the
    // one that carries the cap (advertise_stream_cap): both are acknowledged, in order.
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, h2.initial_window_size},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
         static_cast<std::uint32_t>(limits.max_header_bytes)},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
    };
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
    rt_->metrics->http2_connections.add();
    nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                          static_cast<std::int32_t>(h2.initial_window_size));

    ++coroutines_;  // the writer
    net::co_spawn(ex_, writer(), [this](std::exception_ptr) {
        --coroutines_;
        coroutine_ended_.notify();
    });

    auto feed = [&](const char* data, std::size_t n) {
        auto r = nghttp2_session_mem_recv(session_, reinterpret_cast<const std::uint8_t*>(data), n);
        wake_writer_.notify();
        arm_deadline();
        if (r >= 0) return true;
        // A connection error: GOAWAY says why before the close (nghttp2 queues none for
        // these). More than 8 CONTINUATION frames in one block (nghttp2's bound) and its
        // outbound-queue flood detection are floods, like ours.
        const bool flood = r == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS || r == NGHTTP2_ERR_FLOODED;
        if (flood) rt_->metrics->http2_calm.add();
        auto code = flood ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR;
        nghttp2_session_terminate_session(session_, code);
        wake_writer_.notify();
        return false;
    };
    bool ok = feed(preread.data(), preread.size());
    std::vector<char> buf(16 * 1024);
    while (ok && !broken_ && !writer_done_ && nghttp2_session_want_read(session_)) {
        // Stop or reload: say GOAWAY (RFC 9113 §6.8), finish the streams begun, then close (a
        // client reconnects to the new config; a reload is seen at the connection's next read).
        if ((w_.stopping || w_.rt != rt_) && !goaway_) {
            goaway_ = true;
            nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                                  nghttp2_session_get_last_proc_stream_id(session_),
                                  NGHTTP2_NO_ERROR, nullptr, 0);
            wake_writer_.notify();
            co_await busy_cancellation();
            continue;
        }
        // Until GOAWAY, a stop cancels the read (like an idle HTTP/1.1 connection).
        if (!goaway_) co_await idle_cancellation();
        arm_deadline();
        auto [ec, n] = co_await client_.async_read_some(net::buffer(buf), use_nothrow);
        if (ec) {
            if (ec == net::error::operation_aborted && !client_.timer.expired() && w_.stopping &&
                !goaway_)
                continue;
            break;
        }
        ok = feed(buf.data(), n);
    }
    co_await busy_cancellation();

    // Teardown: every stream ends (its upstream connection closed), then the writer sends
    // what is left (a GOAWAY) unless the socket broke.
    dead_ = true;
    for (auto& [id, s] : streams_) {
        if (s->upstream) {
            error_code ignored;
            s->upstream->io.socket.close(ignored);
        }
        if (s->h2_upstream) s->h2_upstream->cancel();  // its waiters wake; the stream resets
        s->closed = true;
        s->wake.notify();
        s->wake_in.notify();
    }
    wake_writer_.notify();
    // The writer gets a second to send what is left to a client that reads; then the socket
    // is closed under it (a drain deadline's terminal stop must not wait on a stalled client).
    const auto flush_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (coroutines_ > 0) {
        if (!writer_done_ && !broken_ && std::chrono::steady_clock::now() >= flush_until) {
            broken_ = true;
            error_code ignored;
            client_.socket.close(ignored);
        }
        co_await coroutine_ended_.wait(milliseconds(100));
    }
    streams_.clear();
    // Lingering close (RFC 9112 §9.6's reasoning): a close with unread input makes the kernel
    // send RST, which can destroy the GOAWAY before the client reads it. Input is drained
    // for up to a second, or until the client closes.
    if (!broken_) {
        error_code ignored;
        client_.socket.shutdown(net::ip::tcp::socket::shutdown_send, ignored);
        client_.timer.expires_after(milliseconds(1000));
        for (std::size_t drained = 0; drained < (1u << 20);) {
            auto [ec, n] = co_await client_.socket.async_read_some(net::buffer(buf), use_nothrow);
            if (ec) break;
            drained += n;
        }
    }
}

}  // namespace

net::awaitable<void> serve(worker& w, timed_socket& client, std::string_view preread,
                           const std::string& peer) {
    connection c(w, client, peer);
    co_await c.run(preread);
}

}  // namespace rategate::gateway::http2
