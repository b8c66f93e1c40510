#include <doctest/doctest.h>

#include "gateway/http2/flood_guard.hpp"

using rategate::gateway::http2::flood_guard;
using namespace std::chrono_literals;

TEST_CASE("h2 flood guard: a kind past its limit within one second is a flood") {
    flood_guard g(3, 5);
    auto t0 = flood_guard::clock::time_point{} + 10s;
    for (int i = 0; i < 3; ++i)
        CHECK_FALSE(g.exceeded(flood_guard::kind::reset, t0 + 100ms * i));
    CHECK(g.exceeded(flood_guard::kind::reset, t0 + 900ms));
    // The other kinds have their own counters and limit.
    for (int i = 0; i < 5; ++i)
        CHECK_FALSE(g.exceeded(flood_guard::kind::ping, t0));
    CHECK(g.exceeded(flood_guard::kind::ping, t0));
    CHECK_FALSE(g.exceeded(flood_guard::kind::settings, t0));
    CHECK_FALSE(g.exceeded(flood_guard::kind::empty_frame, t0));
}

TEST_CASE("h2 flood guard: a new second starts a new window") {
    flood_guard g(2);
    auto t0 = flood_guard::clock::time_point{} + 10s;
    CHECK_FALSE(g.exceeded(flood_guard::kind::reset, t0));
    CHECK_FALSE(g.exceeded(flood_guard::kind::reset, t0 + 999ms));
    CHECK_FALSE(g.exceeded(flood_guard::kind::reset, t0 + 1000ms));  // window restarted
    CHECK_FALSE(g.exceeded(flood_guard::kind::reset, t0 + 1500ms));
    CHECK(g.exceeded(flood_guard::kind::reset, t0 + 1999ms));
    // A steady rate at the limit never trips.
    flood_guard steady(100);
    bool tripped = false;
    for (int i = 0; i < 1000; ++i)
        tripped |= steady.exceeded(flood_guard::kind::settings, t0 + 10ms * i);
    CHECK_FALSE(tripped);
}
