// Hand-computed decisions of every algorithm (in-process twin), Guava RateLimiter behaviour for
// smooth_bursty and smooth_warming_up, the chain rule and key hygiene.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "limiters/keys.hpp"
#include "limiters/local/local_store.hpp"

using namespace rategate::limiters;
using rategate::config::algorithm;

namespace {

constexpr double ms = 1000, s = 1'000'000;

// One layer on one key in a fresh in-process store; `at(t, cost)` decides at time t (µs).
struct one_layer {
    layer_spec spec;
    local_store store;
    std::vector<layer_ref> layers;
    one_layer(algorithm a, std::vector<rule_params> rules, double delay_us = 0) {
        spec.algo = a;
        spec.rules = std::move(rules);
        spec.delay_us = delay_us;
        layers.push_back({"k", &spec});
    }
    chain_decision at(double t, double cost = 1) { return store.decide(layers, t, cost); }
    int passes(double t, int tries, double cost = 1) {
        int n = 0;
        for (int i = 0; i < tries; ++i)
            n += at(t, cost).allowed;
        return n;
    }
};

}  // namespace

TEST_CASE("token_bucket: burst, refill, steady stream, cost, clock stepping back") {
    one_layer l(algorithm::token_bucket, {{10, 1 * s, 5, 0}});  // 10/s, burst 5
    CHECK(l.passes(0, 5) == 5);
    auto d = l.at(0);
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_us == 100 * ms);  // one token every 100 ms
    CHECK(d.remaining == 0);
    CHECK(l.passes(500 * ms, 6) == 5);  // idle 500 ms: full again, no more than the burst
    for (int i = 1; i <= 20; ++i)
        CHECK(l.at(500 * ms + i * 100 * ms).allowed);  // steady at the rate
    CHECK_FALSE(l.at(2400 * ms).allowed);  // clock steps back: no time passes, no extra quota
    auto r = l.at(5 * s, 3);
    CHECK(r.allowed);
    CHECK(r.remaining == 2);
    CHECK(r.reset_us == 300 * ms);
    auto r2 = l.at(5 * s, 3);
    CHECK_FALSE(r2.allowed);
    CHECK(r2.retry_us == 100 * ms);
    CHECK_FALSE(l.at(100 * s, 6).allowed);  // cost above the burst never passes
}

TEST_CASE("token_bucket: very low and very high rates") {
    one_layer slow(algorithm::token_bucket, {{0.01, 1 * s, 1, 0}});
    CHECK(slow.at(0).allowed);
    auto d = slow.at(1 * s);
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_us == 99 * s);
    CHECK_FALSE(slow.at(99 * s).allowed);
    CHECK(slow.at(100 * s).allowed);
    one_layer fast(algorithm::token_bucket, {{1e6, 1 * s, 1000, 0}});
    CHECK(fast.passes(0, 1001) == 1000);
    CHECK(fast.at(0).retry_us == 1);
    CHECK(fast.at(1).allowed);
    CHECK_FALSE(fast.at(1).allowed);
}

TEST_CASE("gcra: same decisions as token_bucket at cost 1") {
    one_layer tb(algorithm::token_bucket, {{4, 1 * s, 3, 0}});
    one_layer g(algorithm::gcra, {{4, 1 * s, 3, 0}});
    double t = 0;
    for (int i = 0; i < 400; ++i) {
        t += (i * 7919 % 13) * 25 * ms;  // bursts and gaps on a 25 ms grid
        auto a = tb.at(t), b = g.at(t);
        REQUIRE(a.allowed == b.allowed);
    }
    one_layer g2(algorithm::gcra, {{10, 1 * s, 5, 0}});
    CHECK(g2.passes(0, 6) == 5);
    CHECK(g2.at(0).retry_us == 100 * ms);
    CHECK_FALSE(g2.at(0, 6).allowed);      // cost above the burst
    CHECK(g2.at(1 * s, 5).allowed);        // full again after 500 ms
    CHECK_FALSE(g2.at(500 * ms).allowed);  // clock back: no extra quota
}

TEST_CASE("gcra: high rates at a realistic clock admit no more than the rate (tat precision)") {
    // At 1.7e15 us a double holds times to 0.25 us: a TAT stored as an absolute time rounded
    // each emission interval to that grid. Before: at 1e7/s (interval 0.1 us) every request
    // was admitted (1,000,000 of 1,000,000 in 10 ms), at 3e6/s 40,009 (limit 30,007), at
    // 9e5/s 10,010 (limit 9,009).
    constexpr double epoch = 1'700'000'000'123'457.0;
    for (double rate : {1e7, 3e6, 9e5, 3e5}) {
        CAPTURE(rate);
        one_layer g(algorithm::gcra, {{rate, 1 * s, 10, 0}});
        one_layer tb(algorithm::token_bucket, {{rate, 1 * s, 10, 0}});
        int admitted = 0, bucket = 0;
        for (int us = 0; us < 10'000; ++us) {  // 10 ms, 100 requests each microsecond
            admitted += g.passes(epoch + us, 100);
            bucket += tb.passes(epoch + us, 100);
        }
        double limit = 10 + rate * 9999 / s;  // burst + the rate over 9,999 us
        CHECK(admitted <= limit);
        CHECK(admitted >= limit - 2);
        CHECK(std::abs(admitted - bucket) <= 1);
    }
}

TEST_CASE("leaky_bucket: meter drains at the rate") {
    one_layer l(algorithm::leaky_bucket, {{2, 1 * s, 4, 0}});  // drains 2/s, capacity 4
    CHECK(l.passes(0, 5) == 4);
    auto d = l.at(0);
    CHECK(d.retry_us == 500 * ms);
    CHECK(l.at(500 * ms).allowed);
    CHECK_FALSE(l.at(500 * ms).allowed);
    auto r = l.at(3 * s, 3);  // drained to 0 by now
    CHECK(r.allowed);
    CHECK(r.remaining == 1);
    CHECK(r.reset_us == 1500 * ms);
    CHECK_FALSE(l.at(10 * s, 5).allowed);  // cost above capacity
}

TEST_CASE("fixed_window: epoch-aligned windows, boundaries, cost") {
    one_layer l(algorithm::fixed_window, {{3, 1 * s, 0, 0}});
    CHECK(l.at(1900 * ms).remaining == 2);
    CHECK(l.at(1950 * ms).remaining == 1);
    CHECK(l.at(1990 * ms).remaining == 0);
    auto d = l.at(1999 * ms);
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_us == 1 * ms);  // the window [1 s, 2 s) ends at 2 s
    CHECK(d.reset_us == 1 * ms);
    CHECK(l.passes(2 * s, 4) == 3);        // new window at the boundary
    CHECK_FALSE(l.at(1500 * ms).allowed);  // clock back: still the [2 s, 3 s) window, no reset
    CHECK(l.at(3 * s, 2).allowed);
    CHECK_FALSE(l.at(3 * s, 2).allowed);
    CHECK(l.at(3 * s, 1).allowed);
    CHECK_FALSE(l.at(10 * s, 4).allowed);  // cost above the limit
    one_layer fast(algorithm::fixed_window, {{1'000'000, 1 * s, 0, 0}});
    CHECK(fast.at(0, 999'999).allowed);
    CHECK(fast.at(1).allowed);
    CHECK_FALSE(fast.at(2).allowed);
    one_layer slow(algorithm::fixed_window, {{1, 100 * s, 0, 0}});
    CHECK(slow.at(0).allowed);
    CHECK(slow.at(1).retry_us == 100 * s - 1);
}

TEST_CASE("sliding_window_log: exact window, several rules") {
    one_layer l(algorithm::sliding_window_log, {{2, 1 * s, 0, 0}});
    CHECK(l.at(0).allowed);
    CHECK(l.at(500 * ms).allowed);
    auto d = l.at(900 * ms);
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_us == 100 * ms);  // the entry at 0 leaves at 1 s
    CHECK(l.at(1 * s).allowed);
    CHECK_FALSE(l.at(1200 * ms).allowed);
    CHECK(l.at(1500 * ms).allowed);
    one_layer two(algorithm::sliding_window_log, {{3, 10 * s, 0, 0}, {2, 1 * s, 0, 0}});
    CHECK(two.passes(0, 3) == 2);  // the 1 s rule binds first
    CHECK(two.at(1 * s).allowed);  // third in 10 s
    auto t = two.at(2 * s);
    CHECK_FALSE(t.allowed);  // the 10 s rule binds now
    CHECK(t.rule == 0);
    CHECK(t.retry_us == 8 * s);
    one_layer cost(algorithm::sliding_window_log, {{5, 1 * s, 0, 0}});
    CHECK(cost.at(0, 3).allowed);
    CHECK_FALSE(cost.at(0, 3).allowed);
    CHECK_FALSE(cost.at(0, 6).allowed);
    CHECK_FALSE(cost.at(-5 * s, 3).allowed);  // clock back: decided at the newest entry's time
}

TEST_CASE("sliding_window_counter: sum of aligned sub-windows, no interpolation") {
    one_layer l(algorithm::sliding_window_counter, {{4, 1 * s, 4, 0}});  // 4 sub-windows of 250 ms
    CHECK(l.passes(0, 2) == 2);
    CHECK(l.passes(300 * ms, 3) == 2);
    auto d = l.at(300 * ms);
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_us == 700 * ms);       // sub-window [0, 250) slides out at 1 s
    CHECK(l.passes(1 * s, 3) == 2);      // the two from t=0 are gone, the two from 300 ms remain
    CHECK(l.passes(1250 * ms, 3) == 2);  // [250 ms, 500 ms) slid out at 1.25 s
    CHECK(l.passes(1500 * ms, 3) == 0);  // 2 at 1 s and 2 at 1.25 s fill the window
    CHECK(l.passes(2 * s, 3) == 2);      // only the 1.25 s pair is left
    CHECK(l.passes(10 * s, 5) == 4);     // long idle: all sub-windows cleared
    CHECK_FALSE(l.at(20 * s, 5).allowed);
}

TEST_CASE("smooth_bursty reproduces Guava: 0.5/s, acquire 1, 6, 2 waits 0 s, 2 s, 12 s") {
    // Guava's acquire() is tryAcquire with an unbounded timeout: use a long delay, and let
    // time pass by each wait as a blocking acquire would.
    one_layer l(algorithm::smooth_bursty, {{0.5, 1, 3600 * s, 0}}, 3600 * s);
    double t = 0;
    std::vector<double> waits;
    for (double cost : {1.0, 6.0, 2.0}) {
        auto d = l.at(t, cost);
        REQUIRE(d.allowed);
        waits.push_back(d.wait_us);
        t += d.wait_us;
    }
    CHECK(waits == std::vector<double>{0, 2 * s, 12 * s});
}

TEST_CASE("smooth_bursty: Guava testSimpleWithWait and tryAcquire without timeout") {
    one_layer l(algorithm::smooth_bursty, {{5, 1, 60 * s, 0}}, 3600 * s);
    double t = 0;
    auto a = l.at(t);
    t += a.wait_us + 200 * ms;  // sleep 200 ms
    auto b = l.at(t);
    t += b.wait_us;
    auto c = l.at(t);
    CHECK(a.wait_us == 0);
    CHECK(b.wait_us == 0);
    CHECK(c.wait_us == 200 * ms);
    one_layer now_only(algorithm::smooth_bursty, {{5, 1, 60 * s, 0}});
    CHECK(now_only.at(0).allowed);
    auto r = now_only.at(0);
    CHECK_FALSE(r.allowed);
    CHECK(r.retry_us == 200 * ms);
    CHECK(now_only.passes(2 * s, 7) == 6);  // 1 s of stored permits (5) + the free ticket
}

TEST_CASE("smooth_bursty: a key idle for idle_ttl since its next free ticket is new again") {
    one_layer l(algorithm::smooth_bursty, {{1, 10, 5 * s, 0}});
    CHECK(l.at(0).allowed);
    CHECK(l.passes(4 * s, 10) == 4);  // 3 stored permits + the free ticket
    // Idle 5 s past the next free ticket: a fresh limiter, no stored permits.
    CHECK(l.passes(20 * s, 10) == 1);
}

TEST_CASE("smooth_warming_up reproduces Guava testWarmUp (2/s, 4 s warm-up, cold factor 3)") {
    one_layer l(algorithm::smooth_warming_up, {{2, 4 * s, 3, 0}}, 3600 * s);
    double t = 0;
    auto acquire8 = [&] {
        std::vector<double> w;
        for (int i = 0; i < 8; ++i) {
            auto d = l.at(t);
            REQUIRE(d.allowed);
            w.push_back(d.wait_us);
            t += d.wait_us;
        }
        return w;
    };
    std::vector<double> cold{0,        1375 * ms, 1125 * ms, 875 * ms,
                             625 * ms, 500 * ms,  500 * ms,  500 * ms};
    CHECK(acquire8() == cold);
    t += 500 * ms + 4 * s;  // repay the last acquire, then go cold again
    CHECK(acquire8() == cold);
    t += 500 * ms + 2 * s;  // not cold yet
    CHECK(acquire8() == std::vector<double>{0, 500 * ms, 500 * ms, 500 * ms, 500 * ms, 500 * ms,
                                            500 * ms, 500 * ms});
}

TEST_CASE("chain rule: a rejection by the last layer consumes nothing anywhere") {
    layer_spec global{algorithm::token_bucket, {{1, 1 * s, 10, 0}}, false, 0};
    layer_spec user{algorithm::token_bucket, {{1, 1 * s, 2, 0}}, false, 0};
    local_store store;
    std::vector<layer_ref> chain{{"g", &global}, {"u", &user}};
    CHECK(store.decide(chain, 0, 1).allowed);
    CHECK(store.decide(chain, 0, 1).allowed);
    auto before = store.peek("g", 0);
    auto d = store.decide(chain, 0, 1);
    CHECK_FALSE(d.allowed);
    CHECK(d.decider == 1);
    CHECK(d.header_layer == 1);
    auto after = store.peek("g", 0);
    REQUIRE(before);
    REQUIRE(after);
    CHECK(after->values == before->values);  // global still at 8 tokens
    CHECK(after->values[0] == 8);
}

TEST_CASE("shadow layers never block and consume only when the request is admitted") {
    layer_spec enforced{algorithm::fixed_window, {{3, 1 * s, 0, 0}}, false, 0};
    layer_spec shadow{algorithm::fixed_window, {{1, 1 * s, 0, 0}}, true, 0};
    local_store store;
    std::vector<layer_ref> chain{{"e", &enforced}, {"s", &shadow}};
    auto a = store.decide(chain, 0, 1);
    CHECK(a.allowed);
    CHECK(a.shadow_mask == 0);
    auto b = store.decide(chain, 0, 1);
    CHECK(b.allowed);  // the shadow layer would have rejected
    CHECK(b.shadow_mask == 2);
    CHECK(store.decide(chain, 0, 1).allowed);
    CHECK_FALSE(store.decide(chain, 0, 1).allowed);  // the enforced layer rejects
    CHECK(store.peek("s", 0)->values[1] == 1);       // shadow consumed only its admitted request
}

TEST_CASE("delay mode: bucket layers reserve, window layers say when to retry") {
    layer_spec bucket{algorithm::token_bucket, {{10, 1 * s, 1, 0}}, false, 500 * ms};
    local_store store;
    std::vector<layer_ref> chain{{"b", &bucket}};
    double waits[6];
    for (int i = 0; i < 6; ++i)
        waits[i] = store.decide(chain, 0, 1).wait_us;
    CHECK(waits[0] == 0);
    CHECK(waits[1] == 100 * ms);
    CHECK(waits[5] == 500 * ms);
    auto over = store.decide(chain, 0, 1);
    CHECK_FALSE(over.allowed);  // would wait 600 ms > delay
    layer_spec window{algorithm::fixed_window, {{1, 1 * s, 0, 0}}, false, 500 * ms};
    std::vector<layer_ref> wchain{{"w", &window}};
    CHECK(store.decide(wchain, 700 * ms, 1).allowed);
    auto later = store.decide(wchain, 700 * ms, 1);
    CHECK_FALSE(later.allowed);
    CHECK(later.wait_us == 300 * ms);  // decide again at the boundary
}

TEST_CASE("in-process store: logical expiry and the key bound") {
    layer_spec spec{algorithm::fixed_window, {{1, 1 * s, 0, 0}}, false, 0};
    local_store store(64, 4);
    for (int i = 0; i < 1000; ++i)
        store.decide({{"k" + std::to_string(i), &spec}}, i * 1000.0, 1);
    CHECK(store.size() <= 64);
    CHECK_FALSE(store.peek("k999", 5 * s));  // past its TTL on the limiter clock
}

TEST_CASE("key hygiene: hostile values are escaped, cannot collide or pick a hash slot") {
    CHECK(escape_key_part("a:b") == "a%3Ab");
    CHECK(escape_key_part("{x}") == "%7Bx%7D");
    CHECK(escape_key_part("a%3Ab") == "a%253Ab");  // no collision with the escape of "a:b"
    CHECK(escape_key_part(std::string("\xff\n", 2)) == "%FF%0A");
    auto k = layer_key("rg:", "per-user", "u=" + escape_key_part("}{evil"));
    CHECK(k == "rg:per-user|{u=%7D%7Bevil}");
    CHECK(std::count(k.begin(), k.end(), '{') == 1);
    CHECK(std::count(k.begin(), k.end(), '}') == 1);
}

TEST_CASE("every algorithm: clock stepping back grants no extra quota") {
    struct c {
        algorithm a;
        rule_params p;
    };
    for (auto [a, p] : std::vector<c>{{algorithm::fixed_window, {3, 1 * s, 0, 0}},
                                      {algorithm::sliding_window_log, {3, 1 * s, 0, 0}},
                                      {algorithm::sliding_window_counter, {3, 1 * s, 4, 0}},
                                      {algorithm::leaky_bucket, {3, 1 * s, 3, 0}},
                                      {algorithm::token_bucket, {3, 1 * s, 3, 0}},
                                      {algorithm::gcra, {3, 1 * s, 3, 0}},
                                      {algorithm::smooth_bursty, {3, 1, 60 * s, 0}},
                                      {algorithm::smooth_warming_up, {3, 1 * s, 3, 0}}}) {
        std::string name = to_string(a);
        CAPTURE(name);
        one_layer l(a, {p});
        double t = 100 * s + 10 * ms;
        int first = l.passes(t, 10);
        CHECK(first >= 1);
        CHECK(first <= 4);
        // 50 s earlier: a clock that steps back is "no time passing", never a reset.
        CHECK(l.passes(t - 50 * s, 10) == 0);
        CHECK(l.passes(t, 10) == 0);
    }
}

TEST_CASE("every algorithm: very low (0.01/s) and very high (1e6/s) rates") {
    // Low: one permit per 100 s.
    struct c {
        algorithm a;
        rule_params low, high;
        int high_burst;
    };
    for (auto [a, low, high, high_burst] : std::vector<c>{
             {algorithm::fixed_window, {1, 100 * s, 0, 0}, {1'000'000, 1 * s, 0, 0}, 1'000'000},
             {algorithm::sliding_window_log, {1, 100 * s, 0, 0}, {1000, 1 * ms, 0, 0}, 1000},
             {algorithm::sliding_window_counter,
              {1, 100 * s, 10, 0},
              {1'000'000, 1 * s, 10, 0},
              1'000'000},
             {algorithm::leaky_bucket, {0.01, 1 * s, 1, 0}, {1e6, 1 * s, 1000, 0}, 1000},
             {algorithm::token_bucket, {0.01, 1 * s, 1, 0}, {1e6, 1 * s, 1000, 0}, 1000},
             {algorithm::gcra, {0.01, 1 * s, 1, 0}, {1e6, 1 * s, 1000, 0}, 1000},
             {algorithm::smooth_bursty,
              {0.01, 1, 3600 * s, 0},
              {1e6, 0.001, 60 * s, 0},
              1001},  // once stored
             {algorithm::smooth_warming_up, {0.01, 100 * s, 3, 0}, {1e6, 1 * ms, 3, 0}, 1}}) {
        std::string name = to_string(a);
        CAPTURE(name);
        one_layer slow(a, {low});
        double t0 = 1000 * s;  // a window boundary for the window algorithms
        CHECK(slow.at(t0).allowed);
        auto d = slow.at(t0 + 1 * s);
        CHECK_FALSE(d.allowed);
        CHECK(d.retry_us >= 90 * s);  // about 100 s (a cold warming-up limiter: 300 s)
        CHECK(slow.at(t0 + 400 * s).allowed);
        one_layer fast(a, {high});
        int n = 0;
        while (n < 2'000'000 && fast.at(t0).allowed)
            ++n;
        if (a == algorithm::smooth_warming_up || a == algorithm::smooth_bursty) {
            // A fresh Guava limiter has no stored permits: tryAcquire(1, 0) takes one, and the
            // next is 1 µs (cold: 3 µs) away.
            CHECK(n == 1);
        } else {
            CHECK(n == high_burst);
        }
        CHECK(fast.at(t0 + 1 * s).allowed);  // a second later the rate has refilled it
        if (a == algorithm::smooth_bursty)
            CHECK(fast.passes(t0 + 2 * s, 2000) == high_burst);  // 1 ms stored + 1
    }
}

TEST_CASE(
    "the algorithm table: one row per algorithm, names and codes as the config and Lua know") {
    std::vector<int> codes;
    for (std::size_t i = 0; i < algorithm_table.size(); ++i) {
        const auto& row = algorithm_table[i];
        CAPTURE(row.name);
        CHECK(static_cast<std::size_t>(row.algo) == i);
        CHECK(std::string(rategate::config::to_string(row.algo)) == row.name);
        CHECK(find_algorithm(row.name) == &row);
        // The Lua twin is named after the algorithm, and A[code] is the row's code.
        CHECK(std::string(row.lua).ends_with(std::string(row.name) + ".lua"));
        codes.push_back(row.code);
        CHECK(row.fields[0] != nullptr);
        CHECK((row.capacity_field < 0 || row.fields[row.capacity_field] != nullptr));
        CHECK((row.reservable ==
               (row.algo != algorithm::fixed_window && row.algo != algorithm::sliding_window_log &&
                row.algo != algorithm::sliding_window_counter)));
    }
    CHECK(codes == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8});
    CHECK(find_algorithm("tokenbucket") == nullptr);
}

TEST_CASE("the algorithm table: a rule's parameters are its fields in the row's order") {
    rategate::config::rule_config r;
    r.limit = 7;
    r.window = rategate::config::micros(2'000'000);
    r.buckets = 4;
    r.rate = 3.5;
    r.period = rategate::config::micros(1'000'000);
    r.burst = 9;
    r.capacity = 6;
    r.max_burst_seconds = 1.5;
    r.idle_ttl = rategate::config::micros(10'000'000);
    r.warmup_period = rategate::config::micros(3'000'000);
    r.cold_factor = 2.5;
    CHECK(to_params(algorithm::fixed_window, r) == rule_params{7, 2e6, 0, 0});
    CHECK(to_params(algorithm::sliding_window_log, r) == rule_params{7, 2e6, 0, 0});
    CHECK(to_params(algorithm::sliding_window_counter, r) == rule_params{7, 2e6, 4, 0});
    CHECK(to_params(algorithm::leaky_bucket, r) == rule_params{3.5, 1e6, 6, 0});
    CHECK(to_params(algorithm::token_bucket, r) == rule_params{3.5, 1e6, 9, 0});
    CHECK(to_params(algorithm::gcra, r) == rule_params{3.5, 1e6, 9, 0});
    CHECK(to_params(algorithm::smooth_bursty, r) == rule_params{3.5, 1.5, 10e6, 0});
    CHECK(to_params(algorithm::smooth_warming_up, r) == rule_params{3.5, 3e6, 2.5, 0});
}
