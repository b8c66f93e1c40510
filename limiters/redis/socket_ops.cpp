#include "limiters/redis/socket_ops.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <memory>
#include <vector>

namespace rategate::limiters::redis {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using clock = std::chrono::steady_clock;
using namespace net::experimental::awaitable_operators;

namespace {
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);
}  // namespace

net::awaitable<std::error_code> open_socket(tcp::socket& s, endpoint to, clock::time_point deadline,
                                            std::string& why, std::function<bool()> stopped) {
    auto ex = s.get_executor();
    boost::system::error_code ignored;
    s.close(ignored);
    s = tcp::socket(ex);
    const auto& host = to.host;
    auto name = host + ":" + std::to_string(to.port);
    net::steady_timer timer(ex, deadline);
    // A numeric address needs no resolver (whose getaddrinfo runs on a thread of Asio's own: a
    // second thread in a one-loop process makes every socket call dearer).
    std::vector<tcp::endpoint> endpoints;
    boost::system::error_code numeric;
    if (auto address = net::ip::make_address(host, numeric); !numeric) {
        endpoints.emplace_back(address, to.port);
    } else {
        tcp::resolver local(ex);
        auto resolved = co_await (local.async_resolve(host, std::to_string(to.port), use_nothrow) ||
                                  timer.async_wait(use_nothrow));
        if (resolved.index() == 1) {
            why = "timed out resolving " + host;
            co_return make_error_code(client_error::timeout);
        }
        auto [rec, results] = std::get<0>(resolved);
        if (rec) {
            why = "cannot resolve " + host + ": " + rec.message();
            co_return make_error_code(client_error::not_connected);
        }
        for (const auto& r : results)
            endpoints.push_back(r.endpoint());
    }
    if (stopped && stopped()) co_return make_error_code(client_error::stopped);
    timer.expires_at(deadline);
    auto connected_to =
        co_await (net::async_connect(s, endpoints, use_nothrow) || timer.async_wait(use_nothrow));
    if (connected_to.index() == 1) {
        why = "timed out connecting to " + name;
        co_return make_error_code(client_error::timeout);
    }
    if (auto [cec, ep] = std::get<0>(connected_to); cec) {
        why = "cannot connect to " + name + ": " + cec.message();
        co_return make_error_code(client_error::not_connected);
    }
    s.set_option(tcp::no_delay(true), ignored);
    co_return std::error_code{};
}

net::awaitable<std::pair<trip, boost::system::error_code>> round_trip(tcp::socket& s,
                                                                      multiplexer& m,
                                                                      const reply_slot& last,
                                                                      clock::time_point deadline,
                                                                      std::vector<char>& buf) {
    auto out = m.prepare_write();
    net::steady_timer timer(s.get_executor(), deadline);
    auto wrote = co_await (net::async_write(s, net::buffer(out), use_nothrow) ||
                           timer.async_wait(use_nothrow));
    if (wrote.index() == 1 || std::get<0>(std::get<0>(wrote)))
        co_return std::pair{trip::write_failed, boost::system::error_code{}};
    m.commit_write(clock::now());
    while (!last.done()) {
        auto got = co_await (s.async_read_some(net::buffer(buf), use_nothrow) ||
                             timer.async_wait(use_nothrow));
        if (got.index() == 1) co_return std::pair{trip::timed_out, boost::system::error_code{}};
        auto [ec, n] = std::get<0>(got);
        if (ec) co_return std::pair{trip::closed, ec};
        if (m.consume(buf.data(), n))
            co_return std::pair{trip::garbled, boost::system::error_code{}};
    }
    co_return std::pair{trip::done, boost::system::error_code{}};
}

net::awaitable<std::optional<std::vector<reply>>> converse(tcp::socket& s,
                                                           std::vector<std::string> commands,
                                                           clock::time_point deadline,
                                                           std::string& why) {
    multiplexer m;
    std::vector<std::shared_ptr<reply_slot>> slots;
    for (auto& c : commands) {
        slots.push_back(std::make_shared<reply_slot>());
        m.push(std::move(c), slots.back());
    }
    std::vector<char> buf(4096);
    auto [t, ec] = co_await round_trip(s, m, *slots.back(), deadline, buf);
    switch (t) {
        case trip::done:
            break;
        case trip::write_failed:
            why = "write failed";
            co_return std::nullopt;
        case trip::timed_out:
            why = "no answer within command_timeout";
            co_return std::nullopt;
        case trip::closed:
            why = "connection closed: " + ec.message();
            co_return std::nullopt;
        case trip::garbled:
            why = "protocol error";
            co_return std::nullopt;
    }
    std::vector<reply> out_replies;
    for (auto& slot : slots)
        out_replies.push_back(std::move(slot->value()));
    co_return out_replies;
}

}  // namespace rategate::limiters::redis
