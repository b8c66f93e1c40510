#include "gateway/proxy/forward.hpp"

#include <spdlog/spdlog.h>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <optional>

#include "gateway/http/error_response.hpp"
#include "gateway/http/http_head.hpp"
#include "gateway/http/ratelimit_headers.hpp"
#include "gateway/http/response_framing.hpp"
#include "gateway/http/router.hpp"
#include "gateway/proxy/header_rewrite.hpp"
#include "gateway/proxy/relay.hpp"
#include "gateway/proxy/tunnel.hpp"
#include "gateway/runtime/deadline.hpp"
#include "gateway/runtime/worker.hpp"

namespace rategate::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using error_code = boost::system::error_code;
using std::chrono::milliseconds;

namespace {

constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

// A request body that was neither read nor forwarded leaves the connection mid-message.
bool can_keep_alive(const request_parser& p) {
    return p.is_done() && p.get().keep_alive();
}

// After the upstream's 101: the response head goes to the client, then the connection is a
// two-way byte tunnel until either side closes or idle_timeout passes. Never kept alive.
net::awaitable<bool> open_tunnel(worker& w, runtime& rt, timed_socket& client,
                                 beast::flat_buffer& client_buffer, upstream_connection& up,
                                 http::response_header<>& res, const std::string& request_id,
                                 const config::route_config& route, const rate_headers* rate) {
    rewrite_response_headers(res, request_id);
    if (rate) apply_rate_headers(res, route.headers, *rate, /*keep_stricter_backend=*/true);
    res.set(http::field::upgrade, "websocket");
    res.set(http::field::connection, "Upgrade");
    up.response_head.clear();
    append_response_head(up.response_head, res);
    client.timer.expires_after(rt.cfg->limits.idle_timeout);
    auto [ec, n] = co_await net::async_write(client, net::buffer(up.response_head), use_nothrow);
    if (ec) co_return false;
    relay_buffer up_buf(w), down_buf(w);
    rt.metrics->websocket_tunnels_open.fetch_add(1, std::memory_order_relaxed);
    rt.metrics->websocket_tunnels.add();
    co_await run_tunnel(client, client_buffer, up.io, up.buffer, rt.cfg->limits.idle_timeout,
                        up_buf.get(), down_buf.get(), worker::relay_buffer_size);
    rt.metrics->websocket_tunnels_open.fetch_sub(1, std::memory_order_relaxed);
    co_return false;
}

}  // namespace

connect_failure describe_connect_failure(const error_code& ec, std::string_view upstream) {
    const bool timed_out = ec == net::error::timed_out;
    std::string name = "\"" + std::string(upstream) + "\"";
    std::string message = ec == net::error::no_protocol_option
                              ? "upstream " + name + " did not agree to HTTP/2 (ALPN)"
                          : timed_out ? "timed out connecting to upstream " + name
                                      : "cannot connect to upstream " + name;
    return {timed_out ? 504u : 502u, timed_out ? "upstream_timeout" : "upstream_unavailable",
            std::move(message)};
}

bool is_idempotent(http::verb v) {
    switch (v) {
        case http::verb::get:
        case http::verb::head:
        case http::verb::options:
        case http::verb::put:
        case http::verb::delete_:
        case http::verb::trace:
            return true;
        default:
            return false;
    }
}

bool is_stale_connection_error(const error_code& ec) {
    return ec == http::error::end_of_stream || ec == net::error::eof ||
           ec == net::error::connection_reset || ec == net::error::broken_pipe ||
           ec == http::error::partial_message;
}

net::awaitable<bool> write_error(timed_socket& client, milliseconds timeout, unsigned status,
                                 std::string_view code, std::string_view message, bool keep_alive,
                                 unsigned version, bool head_request) {
    auto res = make_error_response(status, code, message, keep_alive, version == 10 ? 10 : 11);
    if (head_request) omit_body(res);
    client.timer.expires_after(timeout);
    auto [ec, n] = co_await http::async_write(client, res, use_nothrow);
    co_return !ec;
}

net::awaitable<bool> proxy_request(worker& w, runtime& rt, timed_socket& client,
                                   beast::flat_buffer& client_buffer, request_parser& parser,
                                   const config::route_config& route, std::string_view peer_ip,
                                   const rate_headers* rate_limits, exchange_record& record) {
    auto& req = parser.get();
    const auto& limits = rt.cfg->limits;
    auto& pool = rt.pool(route.upstream);
    const auto& up_cfg = pool.settings();
    const unsigned client_version = req.version();
    const bool head_request = req.method() == http::verb::head;
    bool client_keep_alive = req.keep_alive();

    bool expect_continue = beast::iequals(req[http::field::expect], "100-continue");
    // Only `Upgrade: websocket` on a websocket route is tunnelled (RFC 6455 §4.1); elsewhere
    // Upgrade is hop-by-hop and removed with the others.
    const bool websocket = route.websocket &&
                           beast::iequals(req[http::field::upgrade], "websocket") &&
                           http::token_list{req[http::field::connection]}.exists("upgrade");
    record.request_id = rewrite_request_headers(req, {peer_ip, client.tls ? "https" : "http"});
    const auto& request_id = record.request_id;
    if (!route.strip_prefix.empty())
        req.target(strip_path_prefix(req.target(), route.strip_prefix));
    req.version(11);
    req.keep_alive(true);
    if (websocket) {
        req.set(http::field::upgrade, "websocket");
        req.set(http::field::connection, "Upgrade");
    }

    if (up_cfg.protocol != config::upstream_protocol::http1)
        co_return co_await proxy_request_h2(w, rt, client, client_buffer, parser, route,
                                            rate_limits, record, client_version, client_keep_alive,
                                            expect_continue);

    const bool has_body = !parser.is_done();
    const bool idempotent = is_idempotent(req.method());
    auto fail = [&](unsigned status, std::string_view code,
                    std::string_view message) -> net::awaitable<bool> {
        record.status = status;
        bool keep = client_keep_alive && can_keep_alive(parser) && !w.stopping;
        bool ok = co_await write_error(client, limits.idle_timeout, status, code, message, keep,
                                       client_version, head_request);
        co_return ok&& keep;
    };

    // Connect: a failed connect is retried once on the next target for idempotent methods;
    // a pooled connection found dead on first use is replaced by a fresh one.
    std::unique_ptr<upstream_connection> up;
    error_code ec;
    up = co_await pool.acquire(pool.next_target(), ec);
    if (ec && idempotent) up = co_await pool.acquire(pool.next_target(), ec);
    if (ec) {
        auto f = describe_connect_failure(ec, route.upstream);
        co_return co_await fail(f.status, f.code, f.message);
    }

    relay_buffer buffer(w);

    if (expect_continue && has_body) {
        static constexpr std::string_view continue_line = "HTTP/1.1 100 Continue\r\n\r\n";
        client.timer.expires_after(limits.idle_timeout);
        auto [wec, n] = co_await net::async_write(client, net::buffer(continue_line), use_nothrow);
        if (wec) co_return false;
    }

    // Send the request (header and streamed body), then read the response header.
    std::optional<http::response_parser<http::buffer_body>> rp;
    auto read_response_header = [&]() -> net::awaitable<error_code> {
        rp.emplace();
        rp->body_limit(boost::none);
        if (req.method() == http::verb::head) rp->skip(true);
        up->io.timer.expires_after(up_cfg.response_timeout);
        auto [hec, n] = co_await http::async_read_header(up->io, up->buffer, *rp, use_nothrow);
        if (hec && up->io.timer.expired()) hec = net::error::timed_out;
        co_return hec;
    };
    const bool request_chunked = req.chunked();
    const auto sent_at = std::chrono::steady_clock::now();
    for (int attempt = 0;; ++attempt) {
        relay_result sent;
        if (request_chunked) {
            http::serializer<true, http::buffer_body> sr{req};
            sent = co_await relay<true>(client, client_buffer, parser, up->io, &sr, nullptr,
                                        limits.idle_timeout, up_cfg.response_timeout, buffer.get(),
                                        worker::relay_buffer_size);
        } else {
            up->request_head.clear();
            append_request_head(up->request_head, req);
            sent = co_await relay<true>(client, client_buffer, parser, up->io, nullptr,
                                        &up->request_head, limits.idle_timeout,
                                        up_cfg.response_timeout, buffer.get(),
                                        worker::relay_buffer_size);
        }
        if (sent.read) {
            if (sent.read == http::error::body_limit)
                co_return co_await fail(413, "body_too_large",
                                        "request body exceeds max_body_bytes");
            if (sent.read == net::error::timed_out || sent.read == http::error::end_of_stream ||
                sent.read == net::error::eof || sent.read == net::error::connection_reset)
                co_return false;  // the client went away or stalled: nobody to answer
            std::string message = "malformed request body: " + sent.read.message();
            co_return co_await fail(400, "bad_request", message);
        }
        error_code rec = sent.write;
        record.bytes_in = sent.body_bytes;
        record.upstream = pool.target_name(up->target);
        if (!rec) rec = co_await read_response_header();
        // Interim 1xx responses (other than 101) are consumed: we answered Expect ourselves.
        while (!rec && rp->get().result_int() / 100 == 1 && rp->get().result_int() != 101)
            rec = co_await read_response_header();
        if (!rec) break;
        if (attempt == 0 && up->reused && !has_body && idempotent &&
            is_stale_connection_error(rec)) {
            up = co_await pool.acquire(up->target, ec, /*allow_reuse=*/false);
            if (!ec) continue;
            rec = ec;
        }
        bool timed_out = rec == net::error::timed_out;
        std::string message =
            "upstream \"" + route.upstream + "\" " +
            (timed_out ? std::string("did not respond in time") : "failed: " + rec.message());
        co_return co_await fail(timed_out ? 504 : 502,
                                timed_out ? "upstream_timeout" : "upstream_error", message);
    }

    // Stream the response back.
    record.upstream_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - sent_at)
            .count();
    auto& res = rp->get();
    record.status = res.result_int();
    if (res.result_int() == 101) {
        if (!websocket || !beast::iequals(res[http::field::upgrade], "websocket"))
            co_return co_await fail(502, "upstream_error",
                                    "upstream \"" + route.upstream +
                                        "\" switched protocols without a WebSocket upgrade");
        co_return co_await open_tunnel(w, rt, client, client_buffer, *up, res, request_id, route,
                                       rate_limits);
    }
    const bool upstream_keep_alive = res.keep_alive();
    rewrite_response_headers(res, request_id);
    if (rate_limits)
        apply_rate_headers(res, route.headers, *rate_limits, /*keep_stricter_backend=*/true);
    // RFC 9112 §6: HTTP/1.0 never gets Transfer-Encoding; HEAD, 204 and 304 never get a body.
    const auto framing =
        h1::frame_response({client_version, client_keep_alive, head_request, res.result_int(),
                            res.has_content_length(), res.chunked()});
    switch (framing.body) {
        case h1::body_framing::none:
            if (client_version < 11) res.erase(http::field::transfer_encoding);
            break;
        case h1::body_framing::sized:
            break;
        case h1::body_framing::chunked:
            res.chunked(true);
            break;
        case h1::body_framing::close_delimited:
            res.erase(http::field::transfer_encoding);
            res.erase(http::field::content_length);
            break;
    }
    client_keep_alive = framing.keep_alive && !w.stopping;
    res.version(client_version == 10 ? 10 : 11);
    res.keep_alive(client_keep_alive);
    relay_result got;
    if (framing.body == h1::body_framing::chunked) {
        http::serializer<false, http::buffer_body> rs{res};
        got = co_await relay<false>(up->io, up->buffer, *rp, client, &rs, nullptr,
                                    up_cfg.response_timeout, limits.idle_timeout, buffer.get(),
                                    worker::relay_buffer_size);
    } else {
        up->response_head.clear();
        append_response_head(up->response_head, res);
        got = co_await relay<false>(up->io, up->buffer, *rp, client, nullptr, &up->response_head,
                                    up_cfg.response_timeout, limits.idle_timeout, buffer.get(),
                                    worker::relay_buffer_size);
    }
    record.bytes_out = got.body_bytes;
    if (got.read || got.write) {
        if (got.read)
            spdlog::warn("upstream {} broke mid-response: {}", route.upstream, got.read.message());
        co_return false;  // the status line is already out: closing is the only signal left
    }
    // Shutting down: no connection goes back to the pool (the loop ends once all are closed).
    if (upstream_keep_alive && rp->is_done() && !w.stopping) pool.release(std::move(up));
    co_return client_keep_alive;
}

}  // namespace rategate::gateway
