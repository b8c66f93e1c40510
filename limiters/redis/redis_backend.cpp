#include "limiters/redis/redis_backend.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <optional>

#include "limiters/redis/chain_codec.hpp"
#include "limiters/redis/connection.hpp"
#include "limiters/redis/group_commit.hpp"
#include "limiters/redis/refund.hpp"

namespace rategate::limiters {

namespace net = boost::asio;

// decide() queues and suspends; a flush posted behind the current handlers sends the queue in
// chunks of max_batch; each reply resumes its waiters.
struct redis_backend::impl {
    struct pending {
        const std::vector<layer_ref>* refs;
        double cost;
        const clock* at;
        bool want_state;
        answer result;
        std::optional<net::any_completion_handler<void()>> handler;
    };

    net::any_io_executor ex;
    std::vector<std::unique_ptr<redis::connection>>& conns;
    bool redis_clock;
    call_observer observer;
    // Group commit: one call in flight per connection (group_commit.hpp).
    redis::group_commit<pending*> queue{max_batch, conns.size()};
    bool flush_posted = false;
    std::size_t next = 0;

    void flush() {
        flush_posted = false;
        for (auto chunk = queue.take(); !chunk.empty(); chunk = queue.take())
            net::co_spawn(ex, send(std::move(chunk)), net::detached);
    }

    net::awaitable<void> send(std::vector<pending*> chunk) {
        std::vector<std::pair<const std::vector<layer_ref>*, double>> reqs;
        std::vector<bool> want(chunk.size());
        std::vector<std::size_t> leased(chunk.size(), 0);  // lease records per request
        reqs.reserve(chunk.size());
        for (std::size_t i = 0; i < chunk.size(); ++i) {
            reqs.push_back({chunk[i]->refs, chunk[i]->cost});
            want[i] = chunk[i]->want_state;
            for (const auto& l : *chunk[i]->refs)
                if (l.lease.want > 0) ++leased[i];
        }
        auto batch = encode_batch(reqs, redis_clock ? -1 : chunk[0]->at->now_us(), &want);
        std::vector<std::string_view> args(batch.args.begin(), batch.args.end());
        auto& conn = *conns[next++ % conns.size()];
        // Local time before the call: the script's TIME is read after it, so TIME - sent is
        // never less than the true offset (the limiter clock minus the local one). The time the
        // reply is handled at would be short of it by the reply's and the loop's delay: the
        // over-limit cache would refuse past the time Redis admits again, and a fixed window's
        // lease would outlive its window, by that long.
        double sent = chunk[0]->at->now_us();
        auto started = std::chrono::steady_clock::now();
        auto r = co_await conn.eval(0, batch.keys, args);
        double latency =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started)
                .count();
        std::vector<chain_decision> decisions;
        std::vector<decided_state> states;
        std::vector<lease_grant> grants;
        double script_now = 0;
        std::error_code ec = r.ec;
        if (!ec && (r.value.is_error() ||
                    !decode_batch(r.value, decisions, &states, &script_now, &leased, &grants) ||
                    decisions.size() != chunk.size() ||
                    !fits_batch(
                        decisions, [&](std::size_t i) -> const auto& { return *chunk[i]->refs; },
                        leased, grants))) {
            if (r.value.is_error()) spdlog::error("limiter script failed: {}", r.value.str);
            ec = make_error_code(redis::client_error::protocol_error);
        }
        if (observer) observer(chunk.size(), latency, static_cast<bool>(ec));
        for (std::size_t i = 0, g = 0; i < chunk.size(); ++i) {
            auto& a = chunk[i]->result;
            a.ec = ec;
            if (ec) continue;
            a.decision = decisions[i];
            a.state = std::move(states[i]);
            a.clock_offset_us = redis_clock ? script_now - sent : 0;
            a.decided_at_us = script_now;
            a.grants.assign(grants.begin() + static_cast<std::ptrdiff_t>(g),
                            grants.begin() + static_cast<std::ptrdiff_t>(g + leased[i]));
            g += leased[i];
        }
        // Resume the waiters, in arrival order, from one fresh handler rather than inside this
        // loop (one scheduler operation per call, not one per request).
        std::vector<net::any_completion_handler<void()>> ready;
        ready.reserve(chunk.size());
        for (auto* p : chunk)
            if (p->handler) {
                ready.push_back(std::move(*p->handler));
                p->handler.reset();
            }
        if (!ready.empty())
            net::post(ex, [hs = std::move(ready)]() mutable {
                for (auto& h : hs)
                    std::move(h)();
            });
        queue.done();
        if (!queue.empty()) flush();
    }
};

redis_backend::redis_backend(const net::any_io_executor& ex,
                             std::vector<std::unique_ptr<redis::connection>>& connections,
                             bool redis_clock, call_observer observer)
    : impl_(new impl{ex, connections, redis_clock, std::move(observer)}) {}

redis_backend::~redis_backend() = default;

net::awaitable<backend::answer> redis_backend::decide(const std::vector<layer_ref>& refs,
                                                      double cost, const clock& at,
                                                      bool want_state) {
    impl::pending p{&refs, cost, &at, want_state, {}, {}};
    auto& i = *impl_;
    i.queue.push(&p);
    if (!i.flush_posted) {
        i.flush_posted = true;
        net::post(i.ex, [&i] { i.flush(); });
    }
    co_await net::async_initiate<const net::use_awaitable_t<>&, void()>(
        [&p](auto handler) { p.handler.emplace(std::move(handler)); }, net::use_awaitable);
    co_return std::move(p.result);
}

net::awaitable<std::error_code> redis_backend::give_back(std::vector<lease_return> items) {
    // Everything the call needs is local or the connection's (which outlives the backend).
    auto& conn = *impl_->conns[impl_->next++ % impl_->conns.size()];
    std::vector<std::string_view> keys;
    for (const auto& r : items)
        keys.push_back(r.key);
    std::string packed = encode_give_back_args(items);
    std::vector<std::string_view> args{packed};
    auto r = co_await conn.eval(1, keys, args);
    if (!r.ec && r.value.is_error()) {
        spdlog::warn("lease give-back failed: {}", r.value.str);
        co_return make_error_code(redis::client_error::protocol_error);
    }
    co_return r.ec;
}

std::uint64_t redis_backend::epoch() const {
    std::uint64_t sum = 0;
    for (const auto& c : impl_->conns)
        sum += c->generation();
    return sum;
}

bool redis_backend::ready() const {
    for (const auto& c : impl_->conns)
        if (c->state() != redis::connection::health::down) return true;
    return false;
}

}  // namespace rategate::limiters
