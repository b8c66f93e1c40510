// Shared by the tests that drive the chain script on a real redis-server (test_parity.cpp,
// test_refund.cpp, test_give_back.cpp): time constants, running a coroutine to completion with a
// wall-clock cap, comparing and printing chain decisions, and the fixture of a fresh
// redis-server with the scripts loaded.
#pragma once

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <future>
#include <sstream>
#include <string>

#include "limiters/chain.hpp"
#include "limiters/redis/chain_codec.hpp"
#include "limiters/redis/connection.hpp"
#include "tests/support/redis_server.hpp"

namespace rategate::test {

constexpr double ms = 1000, s = 1'000'000;         // µs
constexpr double epoch = 1'700'000'000'000'000.0;  // a realistic Unix time in µs

/// Runs `aw` on `ioc` until it completes; fails the test after 30 s.
template <class T>
T run(boost::asio::io_context& ioc, boost::asio::awaitable<T> aw) {
    using namespace std::chrono_literals;
    auto fut = boost::asio::co_spawn(ioc, std::move(aw), boost::asio::use_future);
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (fut.wait_for(0s) != std::future_status::ready) {
        REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, "wall-clock cap exceeded");
        ioc.run_one_for(10ms);
    }
    return fut.get();
}

inline std::string describe(const limiters::chain_decision& d) {
    std::ostringstream o;
    o << "allowed=" << d.allowed << " decider=" << d.decider << " wait=" << d.wait_us
      << " retry=" << d.retry_us << " header=" << d.header_layer << " remaining=" << d.remaining
      << " reset=" << d.reset_us << " rule=" << d.rule << " shadow=" << d.shadow_mask;
    return o.str();
}

inline bool same(const limiters::chain_decision& a, const limiters::chain_decision& b) {
    return a.allowed == b.allowed && a.decider == b.decider && a.wait_us == b.wait_us &&
           a.retry_us == b.retry_us && a.header_layer == b.header_layer &&
           a.remaining == b.remaining && a.reset_us == b.reset_us && a.rule == b.rule &&
           a.shadow_mask == b.shadow_mask;
}

/// A fresh redis-server and one started connection to it with `scripts` loaded (the chain
/// script at index 0, as the backends load it).
struct scripted_redis {
    redis_server server;
    boost::asio::io_context ioc;
    limiters::redis::connection conn;

    explicit scripted_redis(std::vector<limiters::redis::script> scripts)
        : conn(ioc.get_executor(), settings(server.port()), std::move(scripts)) {
        using namespace std::chrono_literals;
        conn.start();
        REQUIRE(run(ioc, conn.wait_up(std::chrono::steady_clock::now() + 5s)));
    }
    static limiters::redis::connection_settings settings(unsigned short port) {
        using namespace std::chrono_literals;
        limiters::redis::connection_settings cs;
        cs.port = port;
        cs.command_timeout = 5000ms;
        cs.watchdog = 10000ms;
        return cs;
    }
    /// Calls script `index` with `keys` and `args`; fails the test on a transport or script
    /// error (`what` names the script in the message).
    limiters::redis::reply call(std::size_t index, const std::vector<std::string_view>& keys,
                                const std::vector<std::string_view>& args, const char* what) {
        auto r = run(ioc, conn.eval(index, keys, args));
        REQUIRE_FALSE(r.ec);
        if (r.value.is_error()) FAIL(what << " script error: " << r.value.str);
        return r.value;
    }
    /// The lease records each request of `reqs` gets back: one per leased layer of its chain.
    static std::vector<std::size_t> lease_counts(
        const std::vector<std::pair<const std::vector<limiters::layer_ref>*, double>>& reqs) {
        std::vector<std::size_t> leased;
        for (const auto& [chain, cost] : reqs) {
            leased.push_back(0);
            for (const auto& l : *chain)
                leased.back() += l.lease.want > 0;
        }
        return leased;
    }
    /// One chain-script call (index 0) for the batch `reqs` at `now` (µs): the raw reply.
    limiters::redis::reply chain_call(
        const std::vector<std::pair<const std::vector<limiters::layer_ref>*, double>>& reqs,
        double now) {
        auto batch = limiters::encode_batch(reqs, now);
        std::vector<std::string_view> keys(batch.keys.begin(), batch.keys.end());
        std::vector<std::string_view> args(batch.args.begin(), batch.args.end());
        return call(0, keys, args, "chain");
    }
};

}  // namespace rategate::test
