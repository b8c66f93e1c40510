#include "limiters/redis/sentinel_watcher.hpp"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <memory>
#include <optional>
#include <vector>

#include "limiters/redis/multiplexer.hpp"
#include "limiters/redis/sentinel.hpp"
#include "limiters/redis/socket_ops.hpp"

namespace rategate::limiters::redis {

namespace net = boost::asio;
using clock = std::chrono::steady_clock;
using namespace net::experimental::awaitable_operators;

namespace {
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);
}  // namespace

sentinel_watcher::sentinel_watcher(net::any_io_executor ex, const connection_settings& settings,
                                   const connection::phase& state,
                                   std::function<void(const endpoint&)> on_switch)
    : executor_(ex),
      settings_(settings),
      state_(state),
      on_switch_(std::move(on_switch)),
      ask_socket_(ex),
      sub_socket_(ex),
      sub_retry_(ex) {}

bool sentinel_watcher::ending() const {
    return state_ == connection::phase::closed || state_ == connection::phase::draining;
}

void sentinel_watcher::close() {
    sub_retry_.cancel();
    boost::system::error_code ignored;
    ask_socket_.close(ignored);
    sub_socket_.close(ignored);
}

std::string sentinel_watcher::auth_command() const {
    const auto& st = *settings_.sentinel;
    if (st.password.empty()) return {};
    return st.username.empty() ? command("AUTH", st.password)
                               : command("AUTH", st.username, st.password);
}

net::awaitable<std::error_code> sentinel_watcher::discover(endpoint& master, std::string& why) {
    const auto& st = *settings_.sentinel;
    // Named: g++ 12 mishandles non-trivial temporaries in a co_await expression.
    std::function<bool()> closed = [this] { return state_ == connection::phase::closed; };
    std::string tried;
    for (std::size_t k = 0; k < st.nodes.size(); ++k) {
        if (state_ != connection::phase::connecting)
            co_return make_error_code(client_error::stopped);
        auto idx = (preferred_ + k) % st.nodes.size();
        const auto& [host, port] = st.nodes[idx];
        auto name = host + ":" + std::to_string(port);
        auto deadline = clock::now() + settings_.command_timeout;
        std::string failed;
        std::optional<std::vector<reply>> replies;
        endpoint node{host, port};
        auto opened = co_await open_socket(ask_socket_, node, deadline, failed, closed);
        if (!opened) {
            std::vector<std::string> cmds;
            if (auto auth = auth_command(); !auth.empty()) cmds.push_back(std::move(auth));
            cmds.push_back(command("SENTINEL", "get-master-addr-by-name", st.master));
            replies = co_await converse(ask_socket_, std::move(cmds), deadline, failed);
        }
        boost::system::error_code ignored;
        ask_socket_.close(ignored);
        if (replies) {
            if (replies->size() == 2 && replies->front().is_error()) {
                failed = "AUTH refused: " + replies->front().str;
            } else if (auto addr = parse_master_addr(replies->back())) {
                master = *addr;
                preferred_ = idx;
                co_return std::error_code{};
            } else {
                failed =
                    replies->back().is_error() ? replies->back().str : "does not know the master";
            }
        }
        tried += (tried.empty() ? "" : "; ") + name + ": " + failed;
    }
    why = "no sentinel gave the address of master \"" + st.master + "\" (" + tried + ")";
    co_return make_error_code(client_error::not_connected);
}

net::awaitable<void> sentinel_watcher::watch() {
    const auto& st = *settings_.sentinel;
    // Named: g++ 12 mishandles non-trivial temporaries in a co_await expression.
    std::function<bool()> closed = [this] { return state_ == connection::phase::closed; };
    std::size_t idx = preferred_;
    auto backoff = settings_.backoff_min;
    while (!ending()) {
        const auto& [host, port] = st.nodes[idx % st.nodes.size()];
        std::string why;
        endpoint node{host, port};
        auto deadline = clock::now() + settings_.connect_timeout;
        auto opened = co_await open_socket(sub_socket_, node, deadline, why, closed);
        if (!opened) co_await subscribed(backoff);
        boost::system::error_code ignored;
        sub_socket_.close(ignored);
        if (ending()) break;
        ++idx;  // try the next sentinel
        std::uniform_real_distribution<double> jitter(0.5, 1.0);
        sub_retry_.expires_after(
            std::chrono::milliseconds(static_cast<long>(backoff.count() * jitter(rng_))));
        backoff = std::min(settings_.backoff_max, backoff * 2);
        co_await sub_retry_.async_wait(use_nothrow);
    }
}

// One subscription on sub_socket_, until the sentinel fails, goes silent or we stop. One reply
// slot is outstanding at a time: every reply (the confirmation, a message, a pong) completes
// it. PINGs are written past the multiplexer, so its count stays one.
net::awaitable<void> sentinel_watcher::subscribed(std::chrono::milliseconds& backoff) {
    const auto& st = *settings_.sentinel;
    multiplexer m;
    auto confirmed = std::make_shared<reply_slot>();
    if (auto auth = auth_command(); !auth.empty()) m.push(std::move(auth), nullptr);
    m.push(command("SUBSCRIBE", "+switch-master"), confirmed);
    auto out = m.prepare_write();
    auto [wec, wn] = co_await net::async_write(sub_socket_, net::buffer(out), use_nothrow);
    if (wec) co_return;
    m.commit_write(clock::now());
    std::vector<char> buf(4096);
    auto message = confirmed;
    auto answer_by = clock::now() + settings_.connect_timeout;  // the confirmation
    const std::string ping = command("PING");
    net::steady_timer timer(executor_);
    while (!ending()) {
        if (message->done()) {
            if (message != confirmed) {
                if (auto to = parse_switch_master(message->value(), st.master)) on_switch_(*to);
            } else if (confirmed->value().is_error()) {
                co_return;  // refused (AUTH): try the next sentinel
            } else {
                backoff = settings_.backoff_min;  // subscribed
            }
            message = std::make_shared<reply_slot>();
            m.push(std::string(), message);  // the next reply, whatever it is
            m.prepare_write();
            m.commit_write(clock::now());
            answer_by = clock::time_point::max();
            continue;
        }
        auto idle_until = std::min(answer_by, clock::now() + settings_.ping_interval);
        timer.expires_at(idle_until);
        auto got = co_await (sub_socket_.async_read_some(net::buffer(buf), use_nothrow) ||
                             timer.async_wait(use_nothrow));
        if (got.index() == 1) {
            if (clock::now() >= answer_by) co_return;  // silent: the next sentinel
            auto [pec, pn] = co_await net::async_write(sub_socket_, net::buffer(ping), use_nothrow);
            if (pec) co_return;
            answer_by = clock::now() + settings_.connect_timeout;
            continue;
        }
        auto [ec, n] = std::get<0>(got);
        if (ec || m.consume(buf.data(), n)) co_return;
    }
}

}  // namespace rategate::limiters::redis
