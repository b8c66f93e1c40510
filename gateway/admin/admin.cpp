#include "gateway/admin/admin.hpp"

#include "gateway/admin/dashboard_page.hpp"
#include "gateway/http/error_response.hpp"
#include "gateway/http/request_normaliser.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <thread>
#include <unordered_set>

namespace rategate::gateway {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

namespace {
constexpr std::size_t max_admin_connections = 1024;  // SPEC §4
}

// The admin loop's io_context, able to destroy its pending sessions while the rest of the admin
// server they refer to still exists (io_context's own destructor runs after every other member).
namespace {
class admin_loop : public net::io_context {
  public:
    using io_context::io_context;
    void discard_pending() { shutdown(); }
};
}  // namespace

struct admin_server::impl {
    explicit impl(net::io_context* shared)
        : own(shared ? nullptr : std::make_unique<admin_loop>(1)),
          ioc(shared ? *shared : *own),
          acceptor(ioc) {}
    std::unique_ptr<admin_loop> own;  ///< its own loop (and thread), or null on a shared loop
    net::io_context& ioc;
    tcp::acceptor acceptor;
    handlers h;
    config::limits_config limits;
    std::size_t open_connections = 0;  ///< admin connections open now (the admin loop only)
    std::unordered_set<boost::beast::tcp_stream*> live;  ///< their streams (stop closes them)
    bool stopped = false;
    std::thread thread;

    http::response<http::string_body> answer(const http::request<http::string_body>& req) {
        http::response<http::string_body> res{http::status::ok, req.version()};
        res.set(http::field::server, "rategate-admin");
        res.keep_alive(req.keep_alive());
        // The main listener's rules for the request line and Host (RFC 9112 §3.2): an
        // HTTP/1.1 request without one Host is a 400, an absolute-form target is served.
        auto normalised =
            h1::normalise_request({req.method_string(), req.target(), req.version(),
                                   req.count(http::field::host), req[http::field::host]});
        if (normalised.error) {
            auto err = make_error_response(normalised.error->status, normalised.error->code,
                                           normalised.error->message, false, req.version());
            err.set(http::field::server, "rategate-admin");
            return err;
        }
        const std::string& path = normalised.request->path;
        if (req.method() != http::verb::get && req.method() != http::verb::head) {
            res.result(http::status::method_not_allowed);
            res.set(http::field::content_type, "application/json");
            res.body() =
                R"({"error":"method_not_allowed","message":"the admin endpoint answers GET only"})";
        } else if (path == "/metrics") {
            res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
            res.body() = h.metrics();
        } else if (path == "/healthz") {
            res.set(http::field::content_type, "application/json");
            res.body() = R"({"status":"ok"})";
        } else if (path == "/readyz") {
            bool ready = h.ready();
            res.result(ready ? http::status::ok : http::status::service_unavailable);
            res.set(http::field::content_type, "application/json");
            res.body() = ready ? R"({"status":"ready"})"
                               : R"({"status":"not_ready","message":"Redis unreachable"})";
        } else if (path == "/config") {
            res.set(http::field::content_type, "application/json");
            res.body() = h.config();
        } else if (path == "/") {
            res.set(http::field::content_type, "text/html; charset=utf-8");
            res.set(http::field::cache_control, "no-cache");
            res.body() = std::string(admin::dashboard_page());
        } else if (path == "/stats" && h.stats) {
            res.set(http::field::content_type, "application/json");
            res.set(http::field::cache_control, "no-store");
            res.body() = h.stats();
        } else if (path == "/top" && h.top) {
            res.set(http::field::content_type, "application/json");
            res.set(http::field::cache_control, "no-store");
            res.body() = h.top();
        } else {
            res.result(http::status::not_found);
            res.set(http::field::content_type, "application/json");
            res.body() =
                R"({"error":"not_found","message":"try /, /metrics, /healthz, /readyz, /config, /stats or /top"})";
        }
        res.prepare_payload();
        return res;
    }

    // Same header deadline and size limits as the main listener; the request body is small.
    net::awaitable<void> session(tcp::socket socket) {
        struct slot_guard {
            impl& in;
            boost::beast::tcp_stream* stream = nullptr;
            ~slot_guard() {
                --in.open_connections;
                in.live.erase(stream);
            }
        } guard{*this};
        boost::beast::tcp_stream s(std::move(socket));
        live.insert(&s);
        guard.stream = &s;
        boost::beast::flat_buffer buf;
        for (bool first = true;; first = false) {
            // Wait for the first byte of a request (idle), then the whole request must arrive
            // within header_timeout.
            if (buf.size() == 0) {
                s.expires_after(first ? limits.header_timeout : limits.idle_timeout);
                auto [ec, n] = co_await s.async_read_some(buf.prepare(4096),
                                                          net::as_tuple(net::use_awaitable));
                if (ec) break;
                buf.commit(n);
            }
            s.expires_after(limits.header_timeout);
            http::request_parser<http::string_body> p;
            p.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
            p.body_limit(64 * 1024);
            auto [ec, n] = co_await http::async_read(s, buf, p, net::as_tuple(net::use_awaitable));
            if (ec) {
                unsigned status = ec == http::error::header_limit ? 431
                                  : ec == http::error::body_limit ? 413
                                  : ec == net::error::timed_out || ec == http::error::end_of_stream
                                      ? 0
                                      : 400;
                if (status) {
                    http::response<http::string_body> res{static_cast<http::status>(status), 11};
                    res.set(http::field::content_type, "application/json");
                    res.body() = status == 431   ? R"({"error":"headers_too_large"})"
                                 : status == 413 ? R"({"error":"body_too_large"})"
                                                 : R"({"error":"bad_request"})";
                    res.keep_alive(false);
                    res.prepare_payload();
                    s.expires_after(limits.header_timeout);
                    co_await http::async_write(s, res, net::as_tuple(net::use_awaitable));
                }
                break;
            }
            auto res = answer(p.get());
            if (p.get().method() == http::verb::head) res.body().clear();  // length kept
            s.expires_after(limits.header_timeout);
            auto [wec, wn] = co_await http::async_write(s, res, net::as_tuple(net::use_awaitable));
            if (wec || !res.keep_alive()) break;
        }
        boost::system::error_code ignored;
        s.socket().shutdown(tcp::socket::shutdown_send, ignored);
    }

    net::awaitable<void> accept() {
        for (;;) {
            auto [ec, s] = co_await acceptor.async_accept(net::as_tuple(net::use_awaitable));
            if (ec) {
                if (!acceptor.is_open() || ec == net::error::operation_aborted) co_return;
                // Out of file descriptors (EMFILE) or similar: back off instead of spinning.
                spdlog::warn("admin accept failed: {}", ec.message());
                net::steady_timer t(ioc, std::chrono::milliseconds(50));
                co_await t.async_wait(net::as_tuple(net::use_awaitable));
                continue;
            }
            if (open_connections >= max_admin_connections) {
                boost::system::error_code ignored;
                s.close(ignored);  // over the cap: refuse at once
                continue;
            }
            ++open_connections;
            net::co_spawn(ioc, session(std::move(s)), [](std::exception_ptr) {});
        }
    }
};

admin_server::admin_server(const config::host_port& at, const config::limits_config& limits,
                           handlers h, net::io_context* loop)
    : impl_(std::make_unique<impl>(loop)) {
    impl_->h = std::move(h);
    impl_->limits = limits;
    tcp::endpoint ep{net::ip::make_address(at.host), at.port};
    impl_->acceptor.open(ep.protocol());
    impl_->acceptor.set_option(net::socket_base::reuse_address(true));
    boost::system::error_code ec;
    impl_->acceptor.bind(ep, ec);
    if (ec)
        throw std::runtime_error("cannot listen on admin address " + at.to_string() + ": " +
                                 ec.message());
    impl_->acceptor.listen();
}

admin_server::~admin_server() {
    stop();
}

void admin_server::start() {
    net::co_spawn(impl_->ioc, impl_->accept(), net::detached);
    if (impl_->own) impl_->thread = std::thread([i = impl_.get()] { i->own->run(); });
}

void admin_server::stop() {
    if (!impl_->own) {
        // A shared loop goes on: closing the acceptor and the streams cancels what they wait
        // for, and each session ends on its own (the loop's owner runs it until it does).
        if (impl_->stopped) return;
        impl_->stopped = true;
        boost::system::error_code ignored;
        impl_->acceptor.close(ignored);
        for (auto* s : impl_->live)
            s->socket().close(ignored);
        return;
    }
    if (!impl_->thread.joinable()) return;
    impl_->own->stop();
    impl_->thread.join();
    impl_->own->discard_pending();  // sessions still open end here, with the server intact
}

}  // namespace rategate::gateway
