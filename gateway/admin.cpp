#include "gateway/admin.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <thread>

namespace rategate::gateway {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

struct admin_server::impl {
    net::io_context ioc{1};
    tcp::acceptor acceptor{ioc};
    handlers h;
    std::thread thread;

    http::response<http::string_body> answer(const http::request<http::string_body>& req) {
        http::response<http::string_body> res{http::status::ok, req.version()};
        res.set(http::field::server, "rategate-admin");
        res.keep_alive(req.keep_alive());
        auto path = std::string(req.target().substr(0, req.target().find('?')));
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
        } else {
            res.result(http::status::not_found);
            res.set(http::field::content_type, "application/json");
            res.body() =
                R"({"error":"not_found","message":"try /metrics, /healthz, /readyz or /config"})";
        }
        res.prepare_payload();
        return res;
    }

    net::awaitable<void> session(tcp::socket s) {
        boost::beast::flat_buffer buf;
        for (;;) {
            http::request_parser<http::string_body> p;
            p.body_limit(64 * 1024);
            auto [ec, n] = co_await http::async_read(s, buf, p, net::as_tuple(net::use_awaitable));
            if (ec) break;
            auto res = answer(p.get());
            auto [wec, wn] = co_await http::async_write(s, res, net::as_tuple(net::use_awaitable));
            if (wec || !res.keep_alive()) break;
        }
        boost::system::error_code ignored;
        s.shutdown(tcp::socket::shutdown_send, ignored);
    }

    net::awaitable<void> accept() {
        for (;;) {
            auto [ec, s] = co_await acceptor.async_accept(net::as_tuple(net::use_awaitable));
            if (ec) {
                if (!acceptor.is_open()) co_return;
                continue;
            }
            net::co_spawn(ioc, session(std::move(s)), [](std::exception_ptr) {});
        }
    }
};

admin_server::admin_server(const config::host_port& at, handlers h)
    : impl_(std::make_unique<impl>()) {
    impl_->h = std::move(h);
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
    impl_->thread = std::thread([i = impl_.get()] { i->ioc.run(); });
}

void admin_server::stop() {
    if (!impl_->thread.joinable()) return;
    impl_->ioc.stop();
    impl_->thread.join();
}

}  // namespace rategate::gateway
