#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "gateway/runtime/deadline.hpp"

using namespace std::chrono_literals;

TEST_CASE("coarse_now: steady_clock's origin, never ahead of it, at most a tick behind") {
    auto previous = rategate::gateway::coarse_now();
    for (int i = 0; i < 200; ++i) {
        auto coarse = rategate::gateway::coarse_now();
        auto fine = std::chrono::steady_clock::now();
        CHECK(coarse >= previous);  // monotonic
        CHECK(coarse <= fine);
        CHECK(fine - coarse < 50ms);  // a tick is 1–4 ms; 50 ms leaves room for a busy machine
        previous = coarse;
        if (i % 50 == 0) std::this_thread::sleep_for(5ms);
    }
}
