#include "gateway/proxy/tunnel.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "gateway/runtime/deadline.hpp"

namespace rategate::gateway {

namespace net = boost::asio;
using namespace net::experimental::awaitable_operators;

namespace {

constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

// One direction. Any byte passing either way pushes both sockets' deadlines out by `idle`.
net::awaitable<void> pump(timed_socket& from, boost::beast::flat_buffer& pending, timed_socket& to,
                          std::chrono::milliseconds idle, char* buf, std::size_t size,
                          std::uint64_t& total) {
    auto touch = [&] {
        from.timer.expires_after(idle);
        to.timer.expires_after(idle);
    };
    if (pending.size() > 0) {
        auto [ec, n] = co_await net::async_write(to, pending.data(), use_nothrow);
        if (ec) co_return;
        total += n;
        pending.consume(n);
        touch();
    }
    for (;;) {
        auto [ec, n] = co_await from.async_read_some(net::buffer(buf, size), use_nothrow);
        if (ec) co_return;
        touch();
        auto [wec, wn] = co_await net::async_write(to, net::buffer(buf, n), use_nothrow);
        if (wec) co_return;
        total += wn;
        touch();
    }
}

}  // namespace

net::awaitable<tunnel_bytes> run_tunnel(timed_socket& client,
                                        boost::beast::flat_buffer& client_pending,
                                        timed_socket& upstream,
                                        boost::beast::flat_buffer& upstream_pending,
                                        std::chrono::milliseconds idle, char* buf_up,
                                        char* buf_down, std::size_t size) {
    client.timer.expires_after(idle);
    upstream.timer.expires_after(idle);
    // Whichever direction ends first (close, error, idle deadline) cancels the other.
    tunnel_bytes out;
    co_await (
        pump(client, client_pending, upstream, idle, buf_up, size, out.client_to_upstream) ||
        pump(upstream, upstream_pending, client, idle, buf_down, size, out.upstream_to_client));
    co_return out;
}

}  // namespace rategate::gateway
