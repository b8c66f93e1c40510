#include "gateway/proxy/forward.hpp"

#include <spdlog/spdlog.h>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>

#include "gateway/http/error_response.hpp"
#include "gateway/http/http_head.hpp"
#include "gateway/http/ratelimit_headers.hpp"
#include "gateway/http/response_framing.hpp"
#include "gateway/http/response_head.hpp"
#include "gateway/http/router.hpp"
#include "gateway/http/text.hpp"
#include "gateway/proxy/header_rewrite.hpp"
#include "gateway/proxy/relay.hpp"
#include "gateway/proxy/request_facts.hpp"
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

// After the upstream's 101: the response head goes to the client, then the connection is a
// two-way byte tunnel until either side closes or idle_timeout passes. Never kept alive.
net::awaitable<bool> open_tunnel(worker& w, runtime& rt, timed_socket& client,
                                 beast::flat_buffer& client_buffer, upstream_connection& up,
                                 const h1::response_head& res, response_rewrite rw) {
    rw.websocket = true;
    up.response_head.clear();
    append_response_head(up.response_head, res, rw);
    up.buffer.consume(res.length);
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

// The longest response head taken from an upstream (Beast's parser default, 8 KiB).
constexpr std::size_t max_response_head_bytes = 8 * 1024;

// Why reading a response head failed: an I/O error, or what was wrong with the head.
struct head_failure {
    error_code ec;
    std::string reason;  ///< set for a malformed head
    explicit operator bool() const { return ec || !reason.empty(); }
};

// Reads the upstream's next response head into `up.buffer` and parses it into `up.head` (the
// bytes stay in the buffer until consumed). A close before any byte is `end_of_stream`, within
// the head `partial_message` (so a stale pooled connection is recognised).
// A connection taken from the pool still has its idle watch queued (upstream_pool::release):
// this read queues behind it, with no read tried first and no re-arm (no system call).
net::awaitable<head_failure> read_response_head(upstream_connection& up,
                                                std::chrono::milliseconds timeout) {
    auto& head = up.head;
    up.io.timer.expires_after(timeout);
    for (;;) {
        auto parsed =
            h1::parse_response_head(buffer_view(up.buffer), max_response_head_bytes, head);
        using state = h1::head_parse::state;
        if (parsed.status == state::complete) co_return head_failure{};
        if (parsed.status == state::malformed)
            co_return head_failure{{}, std::string("malformed response head: ") + parsed.reason};
        if (parsed.status == state::too_large)
            co_return head_failure{http::error::header_limit, {}};
        auto [ec, n] = co_await up.io.async_read_some(up.buffer.prepare(16 * 1024), use_nothrow);
        if (ec == net::error::eof)
            ec = up.buffer.size() ? http::error::partial_message : http::error::end_of_stream;
        if (ec && up.io.timer.expired()) ec = net::error::timed_out;
        if (ec) co_return head_failure{ec, {}};
        up.buffer.commit(n);
    }
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
                                 unsigned version, bool head_request, const rate_headers* rate,
                                 config::header_style style) {
    auto res = make_error_response(status, code, message, keep_alive, version == 10 ? 10 : 11);
    if (rate) apply_rate_headers(res, style, *rate, /*keep_stricter_backend=*/false);
    if (head_request) omit_body(res);
    std::string wire;
    auto ec = co_await write_response(client, res, wire, timeout);
    co_return !ec;
}

net::awaitable<bool> fail_exchange(worker& w, timed_socket& client, const request_parser& parser,
                                   exchange_record& record, milliseconds timeout,
                                   bool client_keep_alive, unsigned client_version,
                                   bool head_request, const config::route_config& route,
                                   const rate_headers* rate, unsigned status, std::string_view code,
                                   std::string_view message) {
    record.status = status;
    // A request body that was neither read nor forwarded leaves the connection mid-message.
    bool keep = client_keep_alive && parser.is_done() && !w.stopping;
    bool ok = co_await write_error(client, timeout, status, code, message, keep, client_version,
                                   head_request, rate, route.headers);
    co_return ok&& keep;
}

net::awaitable<error_code> write_response(timed_socket& client,
                                          const http::response<http::string_body>& res,
                                          std::string& scratch, milliseconds timeout) {
    scratch.clear();
    append_response_head(scratch, res.base());
    scratch += res.body();
    std::array<net::const_buffer, 1> wire{net::buffer(scratch)};
    error_code ec;
    if (!detail::write_now(client, wire, ec))
        ec = co_await detail::write_rest(client, wire, timeout);
    co_return ec;
}

net::awaitable<bool> proxy_request(worker& w, runtime& rt, timed_socket& client,
                                   beast::flat_buffer& client_buffer, request_parser& parser,
                                   const request_facts& facts, const config::route_config& route,
                                   std::string_view peer_ip, const rate_headers* rate_limits,
                                   exchange_record& record) {
    auto& req = parser.get();
    const auto& limits = rt.cfg->limits;
    auto& pool = rt.pool(route.upstream);
    const auto& up_cfg = pool.settings();
    const unsigned client_version = req.version();
    const bool head_request = req.method() == http::verb::head;
    bool client_keep_alive = facts.keep_alive(client_version);

    // RFC 9110 §10.1.1: an HTTP/1.0 request's 100-continue is ignored (no 1xx to HTTP/1.0).
    const bool expect_continue = facts.expect_continue && client_version >= 11;
    // Only `Upgrade: websocket` on a websocket route is tunnelled (RFC 6455 §4.1); elsewhere
    // Upgrade is hop-by-hop and removed with the others.
    const bool websocket = route.websocket && facts.upgrade_websocket && facts.connection_upgrade;
    const client_info forwarded_by{peer_ip, client.tls ? "https" : "http"};
    if (up_cfg.protocol != config::upstream_protocol::http1) {
        record.request_id = rewrite_request_headers(req, forwarded_by);
        if (!route.strip_prefix.empty())
            req.target(strip_path_prefix(req.target(), route.strip_prefix));
        req.version(11);
        req.keep_alive(true);
        if (websocket) {
            req.set(http::field::upgrade, "websocket");
            req.set(http::field::connection, "Upgrade");
        }
        co_return co_await proxy_request_h2(w, rt, client, client_buffer, parser, route,
                                            rate_limits, record, client_version, client_keep_alive,
                                            expect_continue);
    }

    const bool has_body = !parser.is_done();
    const bool idempotent = is_idempotent(req.method());
    auto fail = [&](unsigned status, std::string_view code, std::string_view message) {
        return fail_exchange(w, client, parser, record, limits.idle_timeout, client_keep_alive,
                             client_version, head_request, route, rate_limits, status, code,
                             message);
    };

    // Connect: a failed connect is retried once on the next target for idempotent methods;
    // a pooled connection found dead on first use is replaced by a fresh one.
    std::unique_ptr<upstream_connection> up;
    error_code ec;
    const auto first_target = pool.next_target();
    up = pool.take_idle(first_target);  // no coroutine when a pooled connection is there
    if (!up) up = co_await pool.acquire(first_target, ec);
    if (ec && idempotent) up = co_await pool.acquire(pool.next_target(), ec);
    if (ec) {
        std::string unsent;  // for the request id the access log names
        record.request_id =
            append_forwarded_request_head(unsent, req, forwarded_by, route.strip_prefix, websocket);
        auto f = describe_connect_failure(ec, route.upstream);
        co_return co_await fail(f.status, f.code, f.message);
    }

    relay_buffer buffer(w);
    // The head goes out as the upstream receives it, written once (a retry carries it over).
    const bool request_chunked = facts.chunked;
    up->request_head.clear();
    record.request_id = append_forwarded_request_head(up->request_head, req, forwarded_by,
                                                      route.strip_prefix, websocket);
    if (facts.host_count == 0) {
        // An HTTP/1.0 request may come without Host; what goes upstream is HTTP/1.1, which
        // needs one (RFC 9112 §3.2): the target's, as nginx's $proxy_host.
        auto& head = up->request_head;
        head.insert(head.size() - 2, "Host: " + pool.target_name(up->target) + "\r\n");
    }
    const auto& request_id = record.request_id;

    if (expect_continue && has_body) {
        static constexpr std::string_view continue_line = "HTTP/1.1 100 Continue\r\n\r\n";
        client.timer.expires_after(limits.idle_timeout);
        auto [wec, n] = co_await net::async_write(client, net::buffer(continue_line), use_nothrow);
        if (wec) co_return false;
    }

    // Send the request (head and streamed body), then read the response head.
    const auto sent_at = std::chrono::steady_clock::now();
    for (int attempt = 0;; ++attempt) {
        relay_result sent;
        if (parser.is_done()) {
            // No body: the head alone, offered to the kernel at once (no coroutine).
            std::array<net::const_buffer, 1> head{net::buffer(up->request_head)};
            if (!detail::write_now(up->io, head, sent.write))
                sent.write = co_await detail::write_rest(up->io, head, up_cfg.response_timeout);
        } else {
            sent =
                co_await relay<true>(client, client_buffer, parser, up->io, up->request_head,
                                     request_chunked, limits.idle_timeout, up_cfg.response_timeout,
                                     buffer.get(), worker::relay_buffer_size);
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
        head_failure failure{sent.write, {}};
        record.bytes_in = sent.body_bytes;
        record.upstream = pool.target_name(up->target);
        if (!failure) failure = co_await read_response_head(*up, up_cfg.response_timeout);
        // Interim 1xx responses (other than 101) are consumed: we answered Expect ourselves.
        while (!failure && up->head.status / 100 == 1 && up->head.status != 101) {
            up->buffer.consume(up->head.length);
            failure = co_await read_response_head(*up, up_cfg.response_timeout);
        }
        if (!failure) break;
        if (attempt == 0 && up->reused && !has_body && idempotent &&
            is_stale_connection_error(failure.ec)) {
            auto head = std::move(up->request_head);
            up = co_await pool.acquire(up->target, ec, /*allow_reuse=*/false);
            if (!ec) {
                up->request_head = std::move(head);
                continue;
            }
            failure = head_failure{ec, {}};
        }
        bool timed_out = failure.ec == net::error::timed_out;
        std::string message = "upstream \"" + route.upstream + "\" " +
                              (timed_out    ? std::string("did not respond in time")
                               : failure.ec ? "failed: " + failure.ec.message()
                                            : "failed: " + failure.reason);
        co_return co_await fail(timed_out ? 504 : 502,
                                timed_out ? "upstream_timeout" : "upstream_error", message);
    }

    // Stream the response back.
    const h1::response_head& res = up->head;
    record.upstream_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - sent_at)
            .count();
    record.status = res.status;
    response_rewrite rw{.request_id = request_id,
                        .client_version = client_version == 10 ? 10u : 11u,
                        .rate = rate_limits,
                        .rate_style = route.headers};
    if (res.status == 101) {
        bool upgrade_websocket = false;
        for (const auto& f : res.fields)
            if (h1::iequals(f.name, "Upgrade") && h1::iequals(f.value, "websocket"))
                upgrade_websocket = true;
        if (!websocket || !upgrade_websocket)
            co_return co_await fail(502, "upstream_error",
                                    "upstream \"" + route.upstream +
                                        "\" switched protocols without a WebSocket upgrade");
        co_return co_await open_tunnel(w, rt, client, client_buffer, *up, res, rw);
    }
    const bool upstream_keep_alive =
        h1::upstream_reusable({.keep_alive = res.keep_alive(),
                               .bodiless = head_request || res.status == 204 || res.status == 304,
                               .transfer_encoding = res.transfer_encoding,
                               .chunked = res.chunked,
                               .has_content_length = res.content_length.has_value(),
                               .content_length = res.content_length.value_or(0)});
    // RFC 9112 §6: HTTP/1.0 never gets Transfer-Encoding; HEAD, 204 and 304 never get a body.
    const auto framing = h1::frame_response({client_version, client_keep_alive, head_request,
                                             res.status, res.sized(), res.transfer_encoding});
    client_keep_alive = framing.keep_alive && !w.stopping;
    rw.keep_alive = client_keep_alive;
    rw.framing = framing.body;
    up->response_head.clear();
    append_response_head(up->response_head, res, rw);
    relay_result got;
    bool upstream_done = true;
    if (framing.body == h1::body_framing::none || res.sized()) {
        // No body, or Content-Length: relayed byte for byte, no parser.
        const std::uint64_t length =
            framing.body == h1::body_framing::none ? 0 : *res.content_length;
        up->buffer.consume(res.length);
        if (length <= up->buffer.size()) {
            // All of it is here: head and body offered to the kernel at once (no coroutine).
            std::array<net::const_buffer, 2> pieces{net::buffer(up->response_head),
                                                    net::buffer(up->buffer.data().data(), length)};
            if (!detail::write_now(client, pieces, got.write))
                got.write = co_await detail::write_rest(client, pieces, limits.idle_timeout);
            up->buffer.consume(length);
            got.body_bytes = length;
        } else {
            got = co_await relay_sized(up->io, up->buffer, client, up->response_head, length,
                                       up_cfg.response_timeout, limits.idle_timeout, buffer.get(),
                                       worker::relay_buffer_size);
        }
    } else {
        // Chunked or close-delimited: Beast's parser takes the body from the head on.
        http::response_parser<http::buffer_body> rp;
        rp.body_limit(boost::none);
        error_code pec;
        rp.put(net::buffer(up->buffer.data().data(), res.length), pec);
        up->buffer.consume(res.length);
        if (pec || !rp.is_header_done()) {
            std::string message = "upstream \"" + route.upstream + "\" failed: " + pec.message();
            co_return co_await fail(502, "upstream_error", message);
        }
        got = co_await relay<false>(up->io, up->buffer, rp, client, up->response_head,
                                    framing.body == h1::body_framing::chunked,
                                    up_cfg.response_timeout, limits.idle_timeout, buffer.get(),
                                    worker::relay_buffer_size);
        upstream_done = rp.is_done();
    }
    record.bytes_out = got.body_bytes;
    if (got.read || got.write) {
        if (got.read)
            spdlog::warn("upstream {} broke mid-response: {}", route.upstream, got.read.message());
        co_return false;  // the status line is already out: closing is the only signal left
    }
    // Shutting down: no connection goes back to the pool (the loop ends once all are closed).
    if (upstream_keep_alive && upstream_done && !w.stopping) pool.release(std::move(up));
    co_return client_keep_alive;
}

}  // namespace rategate::gateway
