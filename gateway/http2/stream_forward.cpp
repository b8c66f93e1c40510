// Each HTTP/2 stream of the listener as a request (SPEC §3 "HTTP/2", "gRPC"): admitted through
// proxy/admission like any HTTP/1.1 request, then forwarded to the route's upstream, over
// HTTP/1.1 (the pooled connection, the body framed for it) or over HTTP/2 (a stream of a pooled
// upstream HTTP/2 connection, trailers and gRPC deadlines included, the request body pumped
// beside the response). The connection itself is connection.cpp.
#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <cstdio>

#include "gateway/http/error_response.hpp"
#include "gateway/http/grpc_status.hpp"
#include "gateway/http/grpc_timeout.hpp"
#include "gateway/http/http_head.hpp"
#include "gateway/http/ratelimit_headers.hpp"
#include "gateway/http/response_framing.hpp"
#include "gateway/http/router.hpp"
#include "gateway/http/text.hpp"
#include "gateway/http2/connection_detail.hpp"
#include "gateway/proxy/forward.hpp"
#include "gateway/proxy/header_rewrite.hpp"

namespace rategate::gateway::http2::detail {

// ---- the stream's request ----

void connection::refuse_with_error(stream& s, request_scope& scope, bool grpc, bool head,
                                   unsigned status, std::string_view code, std::string_view message,
                                   const rate_headers* rate, config::header_style style) {
    auto res = make_error_response(status, code, message, true);
    if (rate) apply_rate_headers(res, style, *rate, /*keep_stricter_backend=*/false);
    scope.rec.status = status;
    respond_refusal(s, res, grpc, false, head);
}

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
    co_await answer_stream(*sp);
    co_await end_unfinished_request(*sp);
}

net::awaitable<void> connection::end_unfinished_request(stream& s) {
    if (s.closed || dead_ || s.refused || !s.out_eof) co_return;
    // Named first: g++ 12 miscompiles a co_await inside an if's condition here.
    bool drained = co_await drain_out(s);
    if (!drained) co_return;
    if (s.closed || dead_ || s.end_of_request || s.refused) co_return;
    s.refused = true;  // the rest of the request is not wanted
    if (s.response_ended) {
        nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id, NGHTTP2_NO_ERROR);
        wake_writer_.notify();
    } else {
        s.reset_after_response = true;  // on_frame_send, once the last frame is out
    }
}

net::awaitable<void> connection::answer_stream(stream& s) {
    auto rt = w_.rt;  // a stream runs on the runtime in force when it starts
    request_scope scope(*rt, peer_);
    scope.protocol = request_protocol::http2;
    auto& req = s.head.head();
    const bool grpc = is_grpc_content_type(req[http::field::content_type]);
    const bool head = req.method() == http::verb::head;
    auto refuse = [&](unsigned status, std::string_view code, std::string_view message) {
        refuse_with_error(s, scope, grpc, head, status, code, message);
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
    const admission_input in{.peer_ip = peer_ip_,
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
        refuse_with_error(s, scope, grpc, head, status, code, message, rate, route.headers);
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
    const bool has_te = res.count(http::field::transfer_encoding) > 0;
    if (has_te && res.count(http::field::content_length) > 0) {
        // RFC 9112 §6.3: both is an error (gateway/http/response_head.cpp refuses it too).
        fail(502, "upstream_error",
             "upstream \"" + route.upstream + "\" failed: Content-Length with Transfer-Encoding");
        co_return;
    }
    const bool upstream_chunked = res.chunked();
    const bool upstream_keep_alive =
        h1::upstream_reusable({.keep_alive = res.keep_alive(),
                               .bodiless = head || status == 204 || status == 304,
                               .transfer_encoding = has_te,
                               .chunked = upstream_chunked,
                               .has_content_length = rp->content_length().has_value(),
                               .content_length = rp->content_length().value_or(0)});
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
    // piece (a small response is one write), or alone before a read that waits for the
    // upstream: the client sees the status when the upstream sent it (server-sent events).
    relay_buffer buffer(w_);
    auto& body = rp->get().body();
    bool head_sent = false, buffer_tried = false;
    while (!rp->is_done()) {
        if (!head_sent && (up->buffer.size() == 0 || buffer_tried)) {
            respond(s, status, res.base(), {}, true, false);
            head_sent = true;
        }
        buffer_tried = true;
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
        refuse_with_error(s, scope, grpc, head, status, code, message, rate, route.headers);
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
        auto conn = co_await pool.acquire_h2(target, ec, limits.max_header_bytes, deadline);
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
        auto conn = co_await pool.acquire_h2(target, ec, limits.max_header_bytes, deadline);
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
                s.trailers.emplace_back(h1::ascii_lower(f.name_string()), std::string(f.value()));
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

}  // namespace rategate::gateway::http2::detail
