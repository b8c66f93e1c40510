#include "gateway/proxy/session.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <chrono>
#include <cstring>
#include <optional>

#include "gateway/http/header_scan.hpp"
#include "gateway/http/request_normaliser.hpp"
#include "gateway/http2/connection.hpp"
#include "gateway/identity/client_ip.hpp"
#include "gateway/proxy/admission.hpp"
#include "gateway/proxy/forward.hpp"
#include "gateway/proxy/relay.hpp"
#include "gateway/proxy/request_facts.hpp"
#include "gateway/runtime/deadline.hpp"
#include "gateway/runtime/task_group.hpp"
#include "gateway/runtime/worker.hpp"

namespace rategate::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using error_code = boost::system::error_code;

namespace {

constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

enum class block_status { complete, closed, too_large, malformed };

struct block_result {
    block_status status;
    std::size_t length = 0;
    const char* reason = "";
};

// Reads until `buf` holds a whole header block. Between requests the wait for the first byte
// is bounded by idle_timeout, and from the first byte on the whole block must arrive within
// header_timeout (anti-slowloris). A new connection's first block must be whole by `by`
// instead: header_timeout from the accept, the TLS handshake included (SPEC §3).
net::awaitable<block_result> read_header_block(
    timed_socket& s, beast::flat_buffer& buf, const config::limits_config& limits,
    std::optional<std::chrono::steady_clock::time_point> by) {
    // RFC 9112 §2.2: ignore empty lines before a request line.
    auto skip_crlf = [&] {
        auto v = buffer_view(buf);
        std::size_t n = 0;
        while (n + 1 < v.size() && v[n] == '\r' && v[n + 1] == '\n')
            n += 2;
        buf.consume(n);
    };
    skip_crlf();
    if (buf.size() == 0) {
        // Idle: a stop closes the connection now (worker::stop cancels sessions with partial).
        co_await idle_cancellation();
        if (by)
            s.timer.expires_at(*by);
        else
            s.timer.expires_after(limits.idle_timeout);
        auto [ec, n] = co_await s.async_read_some(buf.prepare(16 * 1024), use_nothrow);
        co_await busy_cancellation();  // a request has begun: it gets its response
        if (ec) co_return block_result{block_status::closed};
        buf.commit(n);
        skip_crlf();
    }
    if (by)
        s.timer.expires_at(*by);
    else
        s.timer.expires_after(limits.header_timeout);
    std::size_t resume = 0;
    for (;;) {
        auto view = buffer_view(buf);
        auto window = view.substr(0, limits.max_header_bytes);
        auto end = find_header_end(window, resume);
        if (end.status == header_end::state::complete)
            co_return block_result{block_status::complete, end.length};
        if (end.status == header_end::state::malformed)
            co_return block_result{block_status::malformed, 0, end.reason};
        if (view.size() >= limits.max_header_bytes) co_return block_result{block_status::too_large};
        resume = end.resume;
        auto [ec, n] = co_await s.async_read_some(buf.prepare(16 * 1024), use_nothrow);
        if (ec) co_return block_result{block_status::closed};
        buf.commit(n);
    }
}

std::string peer_address(const net::ip::tcp::socket& s) {
    error_code ec;
    auto ep = s.remote_endpoint(ec);
    if (ec) return "unknown";
    auto a = ep.address();
    if (a.is_v6() && a.to_v6().is_v4_mapped())
        a = net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6());
    return a.to_string();
}

void close_socket(timed_socket& client) {
    error_code ignored;
    client.socket.shutdown(net::ip::tcp::socket::shutdown_send, ignored);
    client.socket.close(ignored);
}

// Cleartext with h2c: reads while what arrived could still be the HTTP/2 client preface
// (RFC 9113 §3.4); true once it is there. Bytes read stay in `buf` either way. The wait for
// the first byte is idle (a stop closes the connection), like read_header_block's.
net::awaitable<bool> starts_with_preface(timed_socket& s, beast::flat_buffer& buf,
                                         std::chrono::steady_clock::time_point by) {
    const auto preface = http2::client_preface;
    s.timer.expires_at(by);
    for (;;) {
        auto have = buffer_view(buf);
        auto n = std::min(have.size(), preface.size());
        if (have.substr(0, n) != preface.substr(0, n)) co_return false;
        if (n == preface.size()) co_return true;
        if (have.empty()) co_await idle_cancellation();
        auto [ec, got] = co_await s.async_read_some(buf.prepare(16 * 1024), use_nothrow);
        co_await busy_cancellation();
        if (ec) co_return false;
        buf.commit(got);
    }
}

struct session_guard {
    worker& w;
    ~session_guard() { w.open_connections.fetch_sub(1, std::memory_order_relaxed); }
};

}  // namespace

net::awaitable<void> run_session(worker& w, net::ip::tcp::socket socket) {
    const std::string peer = peer_address(socket);
    const std::string peer_ip = identity::canonical_ip(peer).value_or(std::string());
    session_guard guard{w};
    // A new connection is idle (a stop closes it) until its first request begins.
    co_await idle_cancellation();
    timed_socket client(std::move(socket), w.sweeper);
    beast::flat_buffer buf;
    h1::authority_memo host_memo;  // requests of a connection nearly always repeat their Host
    std::string refusal_wire;      // a refusal's bytes, storage reused by the connection
    bool first = true;
    // HTTPS: the handshake counts toward header_timeout: the handshake, the wait for the first
    // request and its header block all end by one deadline. A failed handshake closes the
    // connection; a plain-HTTP request (OpenSSL's SSL_R_HTTP_REQUEST) is first told so with a
    // cleartext 400, as nginx does. The session keeps the context it started with.
    const auto first_by = coarse_now() + w.rt->cfg->limits.header_timeout;
    const auto tls_context = w.rt->tls;
    if (tls_context) {
        client.tls = std::make_unique<tls_stream>(client.socket, *tls_context);
        client.timer.expires_at(first_by);
        auto [ec] =
            co_await client.tls->async_handshake(net::ssl::stream_base::server, use_nothrow);
        if (ec) {
            if (ec.category() == net::error::get_ssl_category() &&
                ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_HTTP_REQUEST) {
                client.tls.reset();  // the answer goes out in cleartext
                co_await write_error(client, w.rt->cfg->limits.idle_timeout, 400, "bad_request",
                                     "a plain HTTP request was sent to the HTTPS port", false);
                close_socket(client);
                co_return;
            }
            error_code ignored;
            client.socket.close(ignored);
            co_return;
        }
    }

    // HTTP/2: ALPN "h2" under TLS, or the client preface on cleartext with h2c (SPEC §3).
    if (client.tls) {
        const unsigned char* proto = nullptr;
        unsigned int len = 0;
        SSL_get0_alpn_selected(client.tls->native_handle(), &proto, &len);
        if (len == 2 && std::memcmp(proto, "h2", 2) == 0) {
            co_await http2::serve(w, client, {}, peer);
            close_socket(client);
            co_return;
        }
    } else if (w.rt->cfg->http2.h2c) {
        if (co_await starts_with_preface(client, buf, first_by)) {
            // The bytes read so far go on; the 16 KiB buffer is not held for the connection.
            std::string preread(buffer_view(buf));
            buf = beast::flat_buffer();
            co_await http2::serve(w, client, preread, peer);
            close_socket(client);
            co_return;
        }
    }

    while (!w.stopping) {
        // This request runs on the runtime in force when it starts (a reload swaps it whole).
        auto rt = w.rt;
        const auto& limits = rt->cfg->limits;
        auto block = co_await read_header_block(
            client, buf, limits,
            first ? std::optional<std::chrono::steady_clock::time_point>(first_by) : std::nullopt);
        first = false;
        if (block.status == block_status::closed) break;
        request_scope scope(*rt, peer);
        bool head_request = false;
        auto fail = [&](unsigned status, std::string_view code, std::string_view message,
                        bool keep = false, unsigned version = 11) {
            scope.rec.status = status;
            return write_error(client, limits.idle_timeout, status, code, message, keep, version,
                               head_request);
        };
        if (block.status == block_status::too_large) {
            co_await fail(431, "headers_too_large",
                          "request header block exceeds max_header_bytes");
            break;
        }
        std::string problem;
        if (block.status == block_status::malformed)
            problem = block.reason;
        else
            problem = check_header_block(buffer_view(buf).substr(0, block.length));
        if (!problem.empty()) {
            co_await fail(400, "bad_request", problem);
            break;
        }

        request_parser parser;
        parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes + 4));
        parser.body_limit(limits.max_body_bytes);
        error_code ec;
        auto used = parser.put(net::buffer(buf.data().data(), block.length), ec);
        if (ec == http::error::body_limit) {
            co_await fail(413, "body_too_large", "request body exceeds max_body_bytes");
            break;
        }
        if (ec || !parser.is_header_done()) {
            // Named first: g++ 12 mis-destroys temporaries of a ?: inside a co_await expression.
            std::string message = "malformed request: ";
            message += ec ? ec.message() : "incomplete header";
            co_await fail(400, "bad_request", message);
            break;
        }
        buf.consume(used);

        auto& req = parser.get();
        head_request = req.method() == http::verb::head;
        const auto facts = read_request_facts(req);
        if (facts.chunked != parser.chunked()) {
            // check_header_block makes them agree; a disagreement would be smuggling.
            co_await fail(400, "bad_request", "ambiguous Transfer-Encoding");
            break;
        }
        const bool keep_alive_asked = facts.keep_alive(req.version());
        const admission_input in{.peer_ip = peer_ip,
                                 .tls = client.tls != nullptr,
                                 .protocol = wire_protocol::http1,
                                 .can_keep_alive = parser.is_done() && keep_alive_asked,
                                 .stopping = &w.stopping,
                                 .version = req.version(),
                                 .head = head_request,
                                 .host_memo = &host_memo,
                                 .facts = &facts};
        // A route with no limiters is decided with no coroutine; a chain is waited for.
        auto decided = admit_head(*rt, req, in, scope);
        if (decided.limits_pending()) co_await check_limits(*rt, req, in, scope, decided);
        if (decided.refusal) {
            auto& res = *decided.refusal;
            scope.rec.status = res.result_int();
            auto wec = co_await write_response(client, res, refusal_wire, limits.idle_timeout);
            if (wec || !res.keep_alive() || decided.close) break;
            continue;
        }
        const auto* route = decided.route;
        auto& rate = decided.rate;
        if (!co_await proxy_request(w, *rt, client, buf, parser, facts, *route, peer,
                                    rate ? &*rate : nullptr, scope.rec))
            break;
    }
    close_socket(client);
}

}  // namespace rategate::gateway
