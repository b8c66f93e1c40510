#include "gateway/http2/connection.hpp"
#include "gateway/http/text.hpp"

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cctype>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "gateway/http/error_response.hpp"
#include "gateway/http/grpc_status.hpp"
#include "gateway/http2/connection_detail.hpp"
#include "gateway/http2/flood_guard.hpp"
#include "gateway/http2/request_head.hpp"
#include "gateway/proxy/admission.hpp"
#include "gateway/runtime/deadline.hpp"
#include "gateway/runtime/task_group.hpp"
#include "gateway/runtime/worker.hpp"

namespace rategate::gateway::http2 {

namespace detail {

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
    if (!s) return 0;
    std::string_view n(reinterpret_cast<const char*>(name), namelen);
    std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    if (s->refused) {
        // Still measured: a refused stream's block may be an HPACK bomb as well.
        if (s->head.add(n, v) == request_head_builder::field_status::flood) c.calm_down();
        return 0;
    }
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
    // A DATA frame of padding alone carries nothing either (on_begin_frame sees its length
    // before the padding is known).
    if (f->hd.type == NGHTTP2_DATA && f->hd.length > 0 && f->hd.length == f->data.padlen &&
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
        c.guard_.exceeded(flood_guard::kind::empty_frame, std::chrono::steady_clock::now()))
        c.calm_down();
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
        s->running = true;
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
                          // Counted under max_concurrent_streams until here, not until the
                          // stream closes: a reset stream's upstream exchange may go on.
                          --c.admitted_streams_;
                          --c.coroutines_;
                          c.coroutine_ended_.notify();
                      });
        return 0;
    }
    if (f->hd.type == NGHTTP2_HEADERS && !end) {
        // RFC 9113 §8.1: trailers end the stream; DATA after them would be a malformed request.
        c.reset(*s, NGHTTP2_PROTOCOL_ERROR);
        s->wake.notify();
        s->wake_in.notify();
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
    if (!s.over_cap && !s.running) --c.admitted_streams_;
    c.streams_.erase(it);  // `s` is gone from here on
    if (--c.open_streams_ == 0) c.arm_deadline();
    return 0;
}

int connection::on_frame_send(nghttp2_session* session, const nghttp2_frame* f, void* self) {
    auto& c = *static_cast<connection*>(self);
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    auto* s = c.find(f->hd.stream_id);
    if (!s) return 0;
    s->response_ended = true;
    // After the response's last frame, never before it (end_unfinished_request); the client
    // may have ended its request since (a refused stream's end_of_request is not kept).
    if (s->reset_after_response && !s->closed &&
        nghttp2_session_get_stream_remote_close(session, s->id) == 0)
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
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
        // RFC 9113 §8.2.2: connection-specific fields (and TE) never go out on HTTP/2.
        if (is_connection_specific(f.name_string()) || h1::iequals(f.name_string(), "te")) continue;
        add(h1::ascii_lower(f.name_string()), std::string(f.value()));
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
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
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

}  // namespace detail

boost::asio::awaitable<void> serve(worker& w, timed_socket& client, std::string_view preread,
                                   const std::string& peer) {
    detail::connection c(w, client, peer);
    co_await c.run(preread);
}

}  // namespace rategate::gateway::http2
