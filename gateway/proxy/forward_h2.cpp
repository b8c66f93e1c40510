// An HTTP/1.1 client's request to an upstream that speaks HTTP/2 (SPEC §3 upstream `protocol`
// "h2" or "h2c"): the request head becomes an HTTP/2 header list, the body streams from the
// client into DATA frames, the response streams back framed for the client's HTTP version.
// proxy_request() (forward.cpp) hands over after the head was rewritten; nothing is buffered
// whole in either direction (the stream's flow-control window follows what the client took).
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>
#include <cstdio>

#include "gateway/http/http_head.hpp"
#include "gateway/http/ratelimit_headers.hpp"
#include "gateway/http/response_framing.hpp"
#include "gateway/http/text.hpp"
#include "gateway/http2/client.hpp"
#include "gateway/http2/request_head.hpp"
#include "gateway/proxy/forward.hpp"
#include "gateway/proxy/header_rewrite.hpp"
#include "gateway/runtime/deadline.hpp"
#include "gateway/runtime/worker.hpp"

namespace rategate::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using error_code = boost::system::error_code;

namespace {

constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

// RFC 9113 §8.2.2 and §8.3.1: what an HTTP/1.1 field list loses on the way to HTTP/2 — the
// connection-specific fields, TE unless "trailers", and Host (it becomes :authority).
bool left_behind(std::string_view name, std::string_view value) {
    using h1::iequals;
    if (iequals(name, "te")) return !iequals(value, "trailers");
    return http2::is_connection_specific(name) || iequals(name, "host");
}

}  // namespace

std::vector<std::pair<std::string, std::string>> h2_request_head(const http::request_header<>& req,
                                                                 std::string_view scheme) {
    std::vector<std::pair<std::string, std::string>> head;
    head.reserve(8 + static_cast<std::size_t>(std::distance(req.begin(), req.end())));
    head.emplace_back(":method", std::string(req.method_string()));
    head.emplace_back(":scheme", std::string(scheme));
    head.emplace_back(":authority", std::string(req[http::field::host]));
    head.emplace_back(":path", std::string(req.target()));
    for (const auto& f : req) {
        if (left_behind(f.name_string(), f.value())) continue;
        head.emplace_back(h1::ascii_lower(f.name_string()), std::string(f.value()));
    }
    return head;
}

net::awaitable<bool> proxy_request_h2(worker& w, runtime& rt, timed_socket& client,
                                      beast::flat_buffer& client_buffer, request_parser& parser,
                                      const config::route_config& route,
                                      const rate_headers* rate_limits, exchange_record& record,
                                      unsigned client_version, bool client_keep_alive,
                                      bool expect_continue) {
    auto& req = parser.get();
    const auto& limits = rt.cfg->limits;
    auto& pool = rt.pool(route.upstream);
    const auto& up_cfg = pool.settings();
    const bool head_request = req.method() == http::verb::head;
    const bool has_body = !parser.is_done();
    auto fail = [&](unsigned status, std::string_view code, std::string_view message) {
        return fail_exchange(w, client, parser, record, limits.idle_timeout, client_keep_alive,
                             client_version, head_request, route, rate_limits, status, code,
                             message);
    };

    const auto scheme = up_cfg.protocol == config::upstream_protocol::h2 ? "https" : "http";
    const auto head = h2_request_head(req, scheme);
    std::shared_ptr<http2::client_stream> stream;
    std::size_t target = 0;
    for (int attempt = 0; attempt < 2 && !stream; ++attempt) {
        error_code ec;
        target = pool.next_target();
        auto conn = co_await pool.acquire_h2(target, ec, limits.max_header_bytes);
        if (ec) {
            if (attempt == 0 && !has_body) continue;  // the next target, once
            auto f = describe_connect_failure(ec, route.upstream);
            co_return co_await fail(f.status, f.code, f.message);
        }
        std::string why;
        stream = conn->submit(head, has_body, why);
        if (!stream && attempt == 1)
            co_return co_await fail(502, "upstream_error",
                                    "upstream \"" + route.upstream + "\" failed: " + why);
    }
    record.upstream = pool.target_name(target);
    const auto sent_at = std::chrono::steady_clock::now();

    if (has_body) {
        if (expect_continue) {
            static constexpr std::string_view continue_line = "HTTP/1.1 100 Continue\r\n\r\n";
            client.timer.expires_after(limits.idle_timeout);
            auto [wec, n] =
                co_await net::async_write(client, net::buffer(continue_line), use_nothrow);
            if (wec) co_return false;
        }
        relay_buffer buffer(w);
        auto& body = req.body();
        while (!parser.is_done()) {
            body.data = buffer.get();
            body.size = worker::relay_buffer_size;
            client.timer.expires_after(limits.idle_timeout);
            auto [rec, n] =
                co_await http::async_read_some(client, client_buffer, parser, use_nothrow);
            if (rec == http::error::need_buffer) rec = {};
            if (rec && client.timer.expired()) rec = net::error::timed_out;
            if (rec == http::error::body_limit)
                co_return co_await fail(413, "body_too_large",
                                        "request body exceeds max_body_bytes");
            if (rec) {
                if (rec == net::error::timed_out || rec == http::error::end_of_stream ||
                    rec == net::error::eof || rec == net::error::connection_reset)
                    co_return false;  // the client went away or stalled: nobody to answer
                std::string message = "malformed request body: " + rec.message();
                co_return co_await fail(400, "bad_request", message);
            }
            auto produced = worker::relay_buffer_size - body.size;
            record.bytes_in += produced;
            if (produced == 0 && !parser.is_done()) continue;
            bool taken = co_await stream->write({buffer.get(), produced}, parser.is_done(),
                                                up_cfg.response_timeout);
            if (!taken) break;  // the upstream answered or failed early: its response says which
        }
    }

    bool answered = co_await stream->read_head(up_cfg.response_timeout);
    if (!answered && stream->refused() && !has_body) {
        // REFUSED_STREAM (or past a GOAWAY): the upstream did nothing with it (RFC 9113
        // §8.7), so it goes once more, on a connection that takes it.
        error_code ec;
        auto conn = co_await pool.acquire_h2(target, ec, limits.max_header_bytes);
        std::string why;
        if (!ec)
            if (auto again = conn->submit(head, false, why)) {
                stream = std::move(again);
                answered = co_await stream->read_head(up_cfg.response_timeout);
            }
    }
    if (!answered) {
        bool timed_out = stream->timed_out();
        std::string message =
            "upstream \"" + route.upstream + "\" " +
            (timed_out ? std::string("did not respond in time") : "failed: " + stream->error());
        co_return co_await fail(timed_out ? 504 : 502,
                                timed_out ? "upstream_timeout" : "upstream_error", message);
    }
    record.upstream_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - sent_at)
            .count();

    http::response_header<> res;
    res.result(stream->status());
    for (const auto& f : stream->headers())
        res.insert(f.name_string(), f.value());
    record.status = res.result_int();
    rewrite_response_headers(res, record.request_id);
    if (rate_limits)
        apply_rate_headers(res, route.headers, *rate_limits, /*keep_stricter_backend=*/true);
    const auto framing =
        h1::frame_response({client_version, client_keep_alive, head_request, res.result_int(),
                            res.count(http::field::content_length) > 0, false});
    switch (framing.body) {
        case h1::body_framing::none:
        case h1::body_framing::sized:
            break;
        case h1::body_framing::chunked:
            res.set(http::field::transfer_encoding, "chunked");
            break;
        case h1::body_framing::close_delimited:
            res.erase(http::field::content_length);
            break;
    }
    // A request body the upstream did not take whole (it answered early) is still on the client
    // connection: only closing it keeps the rest from being read as the next request.
    const bool keep = framing.keep_alive && parser.is_done() && !w.stopping;
    res.version(client_version == 10 ? 10 : 11);
    // RFC 9112 §9.3: HTTP/1.1 persists unless told otherwise, HTTP/1.0 only when told.
    if (client_version == 10 && keep)
        res.set(http::field::connection, "keep-alive");
    else if (client_version != 10 && !keep)
        res.set(http::field::connection, "close");

    // Head and body go out as they arrive; each piece is acknowledged to the upstream (its
    // window reopens) only once the client took it.
    std::string out;
    append_response_head(out, res);
    const bool chunked = framing.body == h1::body_framing::chunked;
    const bool no_body = framing.body == h1::body_framing::none;
    std::string piece;
    for (;;) {
        piece.clear();
        bool got = stream->done() || co_await stream->read_body(piece, up_cfg.response_timeout);
        if (!got) {
            spdlog::warn("upstream {} broke mid-response: {}", route.upstream, stream->error());
            if (!out.empty()) {  // the head at least
                client.timer.expires_after(limits.idle_timeout);
                co_await net::async_write(client, net::buffer(out), use_nothrow);
            }
            co_return false;  // the status line is out: closing is the only signal left
        }
        const auto n = piece.size();
        record.bytes_out += n;
        if (!no_body && n) {
            if (chunked) {
                char size_line[24];
                int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", n);
                out.append(size_line, static_cast<std::size_t>(len));
                out += piece;
                out += "\r\n";
            } else {
                out += piece;
            }
        }
        const bool last = stream->done();
        if (last && chunked) out += "0\r\n\r\n";
        if (!out.empty()) {
            client.timer.expires_after(limits.idle_timeout);
            auto [wec, wn] = co_await net::async_write(client, net::buffer(out), use_nothrow);
            if (wec) co_return false;
            out.clear();
        }
        stream->consumed(n);
        if (last) break;
    }
    co_return keep;
}

}  // namespace rategate::gateway
