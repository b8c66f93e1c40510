#include "gateway/session.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/url/parse.hpp>

#include "gateway/deadline.hpp"
#include "gateway/header_scan.hpp"
#include "gateway/proxy.hpp"
#include "gateway/worker.hpp"

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

std::string_view buffer_view(const beast::flat_buffer& b) {
    auto d = b.data();
    return {static_cast<const char*>(d.data()), d.size()};
}

// Reads until `buf` holds a whole header block. The wait for the first byte is bounded by
// `first_wait` (header_timeout for a new connection, idle_timeout between requests); from
// the first byte on, the whole block must arrive within header_timeout (anti-slowloris).
net::awaitable<block_result> read_header_block(timed_socket& s, beast::flat_buffer& buf,
                                               const config::limits_config& limits,
                                               std::chrono::milliseconds first_wait,
                                               session_slot& slot) {
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
        slot.idle = true;
        s.timer.expires_after(first_wait);
        auto [ec, n] = co_await s.socket.async_read_some(buf.prepare(16 * 1024), use_nothrow);
        slot.idle = false;
        if (ec) co_return block_result{block_status::closed};
        buf.commit(n);
        skip_crlf();
    }
    slot.idle = false;
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
        auto [ec, n] = co_await s.socket.async_read_some(buf.prepare(16 * 1024), use_nothrow);
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

// The path of a request target for routing: origin-form or absolute-form, query dropped.
std::optional<std::string> target_path(std::string_view target) {
    if (auto origin = boost::urls::parse_origin_form(target))
        return std::string(origin->encoded_path());
    if (auto absolute = boost::urls::parse_absolute_uri(target)) {
        auto p = absolute->encoded_path();
        return p.empty() ? std::string("/") : std::string(p);
    }
    return std::nullopt;
}

struct session_guard {
    worker& w;
    std::list<session_slot>::iterator slot;
    ~session_guard() {
        w.sessions.erase(slot);
        w.open_connections.fetch_sub(1, std::memory_order_relaxed);
    }
};

}  // namespace

net::awaitable<void> run_session(worker& w, net::ip::tcp::socket socket) {
    const std::string peer = peer_address(socket);
    timed_socket client(std::move(socket), w.sweeper);
    session_guard guard{w, w.sessions.insert(w.sessions.end(), session_slot{&client.socket, true})};
    const auto& limits = w.cfg->limits;
    beast::flat_buffer buf;
    bool first = true;

    while (!w.stopping) {
        auto block = co_await read_header_block(
            client, buf, limits, first ? limits.header_timeout : limits.idle_timeout, *guard.slot);
        first = false;
        if (block.status == block_status::closed) break;
        if (block.status == block_status::too_large) {
            co_await write_error(client, limits.idle_timeout, 431, "headers_too_large",
                                 "request header block exceeds max_header_bytes", false);
            break;
        }
        std::string problem;
        if (block.status == block_status::malformed)
            problem = block.reason;
        else
            problem = check_header_block(buffer_view(buf).substr(0, block.length));
        if (!problem.empty()) {
            co_await write_error(client, limits.idle_timeout, 400, "bad_request", problem, false);
            break;
        }

        request_parser parser;
        parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes + 4));
        parser.body_limit(limits.max_body_bytes);
        error_code ec;
        auto used = parser.put(net::buffer(buf.data().data(), block.length), ec);
        if (ec == http::error::body_limit) {
            co_await write_error(client, limits.idle_timeout, 413, "body_too_large",
                                 "request body exceeds max_body_bytes", false);
            break;
        }
        if (ec || !parser.is_header_done()) {
            // Named first: g++ 12 mis-destroys temporaries of a ?: inside a co_await expression.
            std::string message = "malformed request: ";
            message += ec ? ec.message() : "incomplete header";
            co_await write_error(client, limits.idle_timeout, 400, "bad_request", message, false);
            break;
        }
        buf.consume(used);

        auto& req = parser.get();
        auto path = target_path(req.target());
        if (!path) {
            co_await write_error(client, limits.idle_timeout, 400, "bad_request",
                                 "invalid request target", false);
            break;
        }
        const auto* route = w.routes.match(req.method_string(), *path, req[http::field::host]);
        if (!route) {
            bool keep = parser.is_done() && req.keep_alive() && !w.stopping;
            std::string message = "no route for " + std::string(req.method_string()) + " " + *path;
            if (!co_await write_error(client, limits.idle_timeout, 404, "not_found", message, keep,
                                      req.version()) ||
                !keep)
                break;
            continue;
        }
        if (!co_await proxy_request(w, client, buf, parser, *route, peer)) break;
    }
    error_code ignored;
    client.socket.shutdown(net::ip::tcp::socket::shutdown_send, ignored);
    client.socket.close(ignored);
}

}  // namespace rategate::gateway
