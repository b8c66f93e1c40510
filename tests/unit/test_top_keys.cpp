#include <doctest/doctest.h>

#include <random>

#include "gateway/admin/top_keys.hpp"

using namespace rategate::gateway::admin;

TEST_CASE("Space-Saving keeps every item above total/capacity, with bounded error") {
    space_saving s(16);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> noise(0, 999);
    std::uint64_t total = 0;
    for (int i = 0; i < 20000; ++i) {
        if (i % 4 == 0) {
            s.add("flooder");  // 5000 times: far above total / capacity
        } else if (i % 10 == 1) {
            s.add("second");  // 2000 times
        } else {
            s.add("noise-" + std::to_string(noise(rng)));
        }
        ++total;
    }
    auto top = s.top();
    REQUIRE(top.size() == 16);
    CHECK(top[0].item == "flooder");
    CHECK(top[0].count >= 5000);
    CHECK(top[0].count - top[0].error <= 5000);
    CHECK(top[1].item == "second");
    std::uint64_t sum = 0;
    for (const auto& e : top)
        sum += e.count;
    CHECK(sum == total);  // Space-Saving's counters always sum to the stream length
}

TEST_CASE("merging snapshots sums counts and keeps the capacity") {
    space_saving a(4), b(4);
    for (int i = 0; i < 10; ++i)
        a.add("x");
    for (int i = 0; i < 7; ++i)
        b.add("x");
    for (const char* k : {"a", "b", "c", "d", "e"})
        b.add(k, 2);
    a.merge(b);
    auto top = a.top();
    CHECK(top.size() == 4);
    CHECK(top[0].item == "x");
    CHECK(top[0].count == 17);
}

TEST_CASE("the window forgets minutes older than its slots") {
    windowed_top w(8, 5);
    const std::int64_t t0 = 1'700'000'000'000;
    w.add("old", t0, 100);
    w.add("new", t0 + 4 * 60'000, 3);
    auto snap = w.snapshot(t0 + 4 * 60'000);
    CHECK(snap.top()[0].item == "old");
    snap = w.snapshot(t0 + 5 * 60'000);  // "old"'s minute left the 5-minute window
    REQUIRE(snap.top().size() == 1);
    CHECK(snap.top()[0].item == "new");
    w.add("newer", t0 + 5 * 60'000, 1);  // reuses old's slot
    CHECK(w.snapshot(t0 + 5 * 60'000).size() == 2);
}
