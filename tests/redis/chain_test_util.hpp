// Shared by the tests that drive the chain script on a real redis-server (test_parity.cpp,
// test_refund.cpp): time constants, running a coroutine to completion with a wall-clock cap,
// and comparing and printing chain decisions.
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

}  // namespace rategate::test
