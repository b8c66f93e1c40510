// The refund script (limiters/lua/refund/refund.lua) on a real redis-server: a refund right
// after a consumption leaves the key deciding exactly as a key that never saw the request;
// a rolled-over window, a full bucket, a missing, expired or malformed key are left alone;
// a log refund only ever over-counts. Every comparison carries a control (the same key
// without the refund, or the wrong refund) that must decide differently, so each test can fail.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <sstream>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include "limiters/redis/connection.hpp"
#include "limiters/redis/redis_chain.hpp"
#include "limiters/redis/refund.hpp"
#include "tests/redis/chain_test_util.hpp"
#include "tests/support/redis_server.hpp"

namespace net = boost::asio;
using namespace rategate::limiters;
using rategate::config::algorithm;
using namespace std::chrono_literals;
using rategate::test::describe;
using rategate::test::epoch;
using rategate::test::ms;
using rategate::test::run;
using rategate::test::s;
using rategate::test::same;

namespace {

// A connection with the chain script (index 0) and the refund script (index 1) loaded, on a
// fresh redis-server.
struct refund_fixture : rategate::test::scripted_redis {
    refund_fixture()
        : scripted_redis(
              {{"chain", std::string(chain_script())}, {"refund", std::string(refund_script())}}) {}
    // One request over `layers` at `now` (the limiter clock); `consumed_at` receives the
    // script's clock (record field 10).
    chain_decision decide(const std::vector<layer_ref>& layers, double now, double cost,
                          double* consumed_at = nullptr) {
        std::vector<chain_decision> out;
        double at = 0;
        REQUIRE(decode_batch(chain_call({{&layers, cost}}, now), out, nullptr, &at));
        REQUIRE(out.size() == 1);
        if (consumed_at) *consumed_at = at;
        return out[0];
    }
    // The refund script's reply for `items`.
    redis::reply refund_reply(const std::vector<refund_item>& items) {
        std::vector<std::string_view> keys;
        for (const auto& it : items)
            keys.push_back(it.key);
        std::string packed = encode_refund_args(items);
        auto r = run(ioc, conn.eval(1, keys, {packed}));
        REQUIRE_FALSE(r.ec);
        return r.value;
    }
    // How many keys the refund changed.
    long long refund(const std::vector<refund_item>& items) {
        auto r = refund_reply(items);
        if (r.is_error()) FAIL("refund script error: " << r.str);
        REQUIRE(r.type == redis::reply::kind::integer);
        return r.integer;
    }
    redis::reply exec(const std::vector<std::string_view>& args) {
        auto r = run(ioc, conn.exec(redis::encode_command(args)));
        REQUIRE_FALSE(r.ec);
        return r.value;
    }
    // The key's value as bytes: a string's, or a ZSET's members and scores; "" when missing.
    std::string dump(const std::string& key) {
        auto type = exec({"TYPE", key}).str;
        if (type == "zset") {
            std::string out = "zset:";
            for (const auto& e : exec({"ZRANGE", key, "0", "-1", "WITHSCORES"}).elements)
                out += e.str + ",";
            return out;
        }
        if (type == "none") return "";
        return exec({"GET", key}).str;
    }
    // A state string's numbers.
    std::vector<double> numbers(const std::string& key) {
        auto v = exec({"GET", key}).str;
        REQUIRE(v.size() % 8 == 0);
        std::vector<double> x(v.size() / 8);
        std::memcpy(x.data(), v.data(), v.size());
        return x;
    }
    long long pttl(const std::string& key) { return exec({"PTTL", key}).integer; }
    void copy(const std::string& from, const std::string& to) {
        exec({"DEL", to});
        exec({"COPY", from, to});
    }
};

// The rules' state numbers of a state string (its two expiry numbers dropped).
std::vector<double> rule_state(std::vector<double> x) {
    REQUIRE(x.size() >= 2);
    x.resize(x.size() - 2);
    return x;
}

struct step {
    double dt;  // µs after the previous step
    double cost;
};

// A sequence of requests that starts at the refund's instant (nothing in between) and then
// moves on: bursts at one instant, short and long gaps, costs 1 to 3.
std::vector<step> sequence(unsigned seed, double long_gap) {
    std::mt19937_64 rng(seed);
    std::vector<step> out{{0, 1}};
    for (int i = 0; i < 80; ++i) {
        auto pick = rng() % 100;
        double dt = pick < 45   ? 0
                    : pick < 85 ? static_cast<double>(rng() % 300'000)
                                : static_cast<double>(rng() % static_cast<long long>(long_gap));
        out.push_back({dt, rng() % 6 == 0 ? static_cast<double>(2 + rng() % 2) : 1});
    }
    return out;
}

struct exact_case {
    std::string name;
    layer_spec spec;
    std::vector<step> history;  // on A, B and C before the refunded request
    step ours;                  // the refunded request: consumed on A and C, refunded on A
    double long_gap;            // the longest gap of the sequence after it
};

std::vector<exact_case> exact_cases() {
    // Where an algorithm's arithmetic runs over time (leaky, token, GCRA, Guava), the history
    // is at the refund's instant: undoing a consumption is exact then; across time the
    // never-came key splits the same drain or refill differently, to a rounding ulp.
    return {
        {"fixed_window",
         {algorithm::fixed_window, {{5, 1 * s, 0, 0}, {12, 10 * s, 0, 0}}, false, 0},
         {{0, 1}, {300 * ms, 2}, {100 * ms, 1}},
         {200 * ms, 1},
         3 * s},
        {"sliding_window_log",
         {algorithm::sliding_window_log, {{5, 1 * s, 0, 0}, {12, 5 * s, 0, 0}}, false, 0},
         {{0, 1}, {300 * ms, 2}, {0, 1}},
         {800 * ms, 1},
         3 * s},
        {"sliding_window_log, fractional costs",
         {algorithm::sliding_window_log, {{5, 1 * s, 0, 0}}, false, 0},
         {{0, 1.5}, {300 * ms, 0.25}},
         {100 * ms, 1.25},
         2 * s},
        {"sliding_window_counter",
         {algorithm::sliding_window_counter, {{6, 1 * s, 4, 0}, {20, 5 * s, 5, 0}}, false, 0},
         {{0, 1}, {300 * ms, 2}, {100 * ms, 1}},
         {200 * ms, 2},
         3 * s},
        {"leaky_bucket",
         {algorithm::leaky_bucket, {{5, 1 * s, 5, 0}, {1.5, 1 * s, 3, 0}}, false, 0},
         {{0, 1}},
         {0, 1},
         2 * s},
        {"leaky_bucket, delay",
         {algorithm::leaky_bucket, {{5, 1 * s, 5, 0}, {1.5, 1 * s, 3, 0}}, false, 2 * s},
         {{0, 2}, {0, 1}},
         {0, 1},
         2 * s},
        {"token_bucket",
         {algorithm::token_bucket, {{3.7, 1 * s, 5, 0}, {20, 10 * s, 10, 0}}, false, 0},
         {{0, 2}},
         {0, 1},
         2 * s},
        {"token_bucket, fresh key",
         {algorithm::token_bucket, {{3.7, 1 * s, 5, 0}, {20, 10 * s, 10, 0}}, false, 0},
         {},
         {0, 2},
         2 * s},
        {"gcra",
         {algorithm::gcra, {{5, 1 * s, 4, 0}, {10, 4 * s, 9, 0}}, false, 0},
         {{0, 2}},
         {0, 1},
         2 * s},
        {"gcra, fresh key",
         {algorithm::gcra, {{3.3, 1 * s, 4, 0}, {7, 2 * s, 9, 0}}, false, 0},
         {},
         {0, 1},
         2 * s},
        {"smooth_bursty, fresh key",
         {algorithm::smooth_bursty, {{2.5, 1.5, 10 * s, 0}, {7, 1, 3 * s, 0}}, false, 0},
         {},
         {0, 1},
         2 * s},
        {"smooth_bursty, delay: a reservation refunded",
         {algorithm::smooth_bursty, {{2.5, 1.5, 10 * s, 0}, {7, 1, 3 * s, 0}}, false, 2 * s},
         {{0, 1}, {0, 2}},
         {0, 1},
         2 * s},
        // A new smooth_warming_up key is cold (stored permits): the history spends them all
        // (11 > both rules' max permits), so the refunded request spends none and the refund
        // (which never gives stored permits back) is exact.
        {"smooth_warming_up, delay: a reservation refunded",
         {algorithm::smooth_warming_up, {{3, 2 * s, 3, 0}, {10, 1 * s, 2.5, 0}}, false, 8 * s},
         {{0, 11}},
         {0, 1},
         3 * s},
    };
}

}  // namespace

TEST_CASE("refund: right after the consumption, the key decides as if the request never came") {
    refund_fixture redis;
    int index = 0;
    for (const auto& c : exact_cases()) {
        CAPTURE(c.name);
        std::string tag = "{x" + std::to_string(index++) + "}";
        std::vector<layer_ref> a{{tag + ":A", &c.spec}}, b{{tag + ":B", &c.spec}},
            ctl{{tag + ":C", &c.spec}};
        double now = epoch + 123'456'789;
        for (const auto& h : c.history) {
            now += h.dt;
            auto da = redis.decide(a, now, h.cost);
            REQUIRE(da.allowed);
            REQUIRE(same(da, redis.decide(b, now, h.cost)));
            REQUIRE(same(da, redis.decide(ctl, now, h.cost)));
        }
        now += c.ours.dt;
        double consumed_at = 0;
        auto d = redis.decide(a, now, c.ours.cost, &consumed_at);
        REQUIRE(d.allowed);
        CHECK(consumed_at == now);
        REQUIRE(same(d, redis.decide(ctl, now, c.ours.cost)));
        std::string before = redis.dump(a[0].key);
        long long ttl_before = redis.pttl(a[0].key);
        CHECK(redis.refund({refund_item_of(a[0], c.ours.cost, consumed_at)}) == 1);
        // The TTL is kept (neither dropped nor extended), and so are the expiry numbers.
        long long ttl_after = redis.pttl(a[0].key);
        if (c.history.empty() && c.spec.algo == algorithm::sliding_window_log) {
            CHECK(ttl_after == -2);  // its only entry removed: the key is gone
        } else {
            CHECK(ttl_after > 0);
            CHECK(ttl_after <= ttl_before);
            if (c.spec.algo != algorithm::sliding_window_log) {
                auto x = redis.numbers(a[0].key);
                std::vector<double> y(before.size() / 8);
                std::memcpy(y.data(), before.data(), before.size());
                REQUIRE(x.size() == y.size());
                CHECK(x[x.size() - 1] == y[y.size() - 1]);
                CHECK(x[x.size() - 2] == y[y.size() - 2]);
            }
        }
        int allowed = 0, rejected = 0, control_differs = 0, mismatches = 0;
        int i = 0;
        for (const auto& st : sequence(static_cast<unsigned>(index) * 31 + 7, c.long_gap)) {
            now += st.dt;
            auto da = redis.decide(a, now, st.cost);
            auto db = redis.decide(b, now, st.cost);
            auto dc = redis.decide(ctl, now, st.cost);
            (da.allowed ? allowed : rejected) += 1;
            control_differs += !same(dc, db);
            if (!same(da, db) && ++mismatches <= 3)
                FAIL_CHECK("request " << i << " at +" << std::fixed << (now - consumed_at)
                                      << " µs, cost " << st.cost << "\n  refunded:   "
                                      << describe(da) << "\n  never came: " << describe(db));
            ++i;
        }
        CHECK(mismatches == 0);
        // The sequence meets the limit, and the key without the refund decides differently:
        // a refund that did nothing (or too little, or too much) would fail above.
        CHECK(allowed > 0);
        CHECK(rejected > 0);
        CHECK(control_differs > 0);
    }
}

TEST_CASE("refund: several keys of one slot in one call") {
    refund_fixture redis;
    layer_spec window{algorithm::fixed_window, {{4, 1 * s, 0, 0}}, false, 0};
    layer_spec bucket{algorithm::token_bucket, {{2, 1 * s, 3, 0}}, false, 0};
    layer_spec log{algorithm::sliding_window_log, {{5, 2 * s, 0, 0}, {8, 10 * s, 0, 0}}, false, 0};
    layer_spec counter{algorithm::sliding_window_counter, {{6, 1 * s, 4, 0}}, false, 0};
    auto chain = [&](const std::string& who) {
        return std::vector<layer_ref>{{"{u}:w:" + who, &window},
                                      {"{u}:b:" + who, &bucket},
                                      {"{u}:l:" + who, &log},
                                      {"{u}:c:" + who, &counter}};
    };
    auto a = chain("a"), b = chain("b");
    double now = epoch + 7 * s + 100 * ms;
    REQUIRE(same(redis.decide(a, now, 1), redis.decide(b, now, 1)));
    double at = 0;
    REQUIRE(redis.decide(a, now, 2, &at).allowed);
    std::vector<refund_item> items;
    for (const auto& l : a)
        items.push_back(refund_item_of(l, 2, at));
    CHECK(redis.refund(items) == 4);
    int mismatches = 0, rejected = 0;
    for (const auto& st : sequence(99, 2 * s)) {
        now += st.dt;
        auto da = redis.decide(a, now, st.cost), db = redis.decide(b, now, st.cost);
        rejected += !db.allowed;
        if (!same(da, db) && ++mismatches <= 3)
            FAIL_CHECK("refunded: " << describe(da) << "\n  never came: " << describe(db));
    }
    CHECK(mismatches == 0);
    CHECK(rejected > 0);
    // The same key twice in one call: each item reads the state the previous one left.
    REQUIRE(redis.decide(a, now + 20 * s, 1, &at).allowed);
    auto tokens = redis.numbers(a[1].key)[0];
    CHECK(redis.refund({refund_item_of(a[1], 0.5, at), refund_item_of(a[1], 0.25, at)}) == 1);
    CHECK(redis.numbers(a[1].key)[0] == tokens + 0.75);
}

TEST_CASE("refund: a window that rolled over is not touched") {
    refund_fixture redis;
    SUBCASE("fixed_window") {
        layer_spec one{algorithm::fixed_window, {{3, 1 * s, 0, 0}}, false, 0};
        layer_spec two{algorithm::fixed_window, {{3, 1 * s, 0, 0}, {20, 10 * s, 0, 0}}, false, 0};
        double tc = epoch + 100 * ms;  // early in a 1 s and a 10 s window
        for (const auto* spec : {&one, &two}) {
            std::string p = spec == &one ? "w1:" : "w2:";
            layer_ref a{p + "a", spec}, b{p + "b", spec};
            double at = 0;
            REQUIRE(redis.decide({a}, tc, 1, &at).allowed);
            // The next 1 s window: its count starts afresh on A and on B.
            REQUIRE(redis.decide({a}, tc + 1 * s, 2).allowed);
            REQUIRE(redis.decide({b}, tc + 1 * s, 2).allowed);
            auto before = redis.dump(a.key);
            long long changed = redis.refund({refund_item_of(a, 1, at)});
            if (spec == &one) {
                // Taking 1 off the new window's count would admit a 4th request in it.
                CHECK(changed == 0);
                CHECK(redis.dump(a.key) == before);
            } else {
                // The 10 s window still holds the request: that rule alone gives it back.
                CHECK(changed == 1);
            }
            CHECK(rule_state(redis.numbers(a.key)) == rule_state(redis.numbers(b.key)));
            CHECK(redis.decide({a}, tc + 1 * s, 1).allowed);
            CHECK_FALSE(redis.decide({a}, tc + 1 * s, 1).allowed);
        }
    }
    SUBCASE("sliding_window_counter") {
        layer_spec spec{algorithm::sliding_window_counter, {{6, 1 * s, 4, 0}}, false, 0};
        double tc = epoch + 100 * ms;  // in the first quarter of a window
        for (double later : {1 * s, 250 * ms, 750 * ms}) {
            CAPTURE(later);
            std::string p = "c" + std::to_string(static_cast<long long>(later)) + ":";
            layer_ref a{p + "a", &spec}, b{p + "b", &spec};
            double at = 0;
            REQUIRE(redis.decide({a}, tc, 2, &at).allowed);
            REQUIRE(redis.decide({a}, tc + later, 1).allowed);
            REQUIRE(redis.decide({b}, tc + later, 1).allowed);
            auto before = redis.dump(a.key);
            long long changed = redis.refund({refund_item_of(a, 2, at)});
            if (later == 1 * s) {
                // Its sub-window left the ring: the slot now counts a later sub-window.
                CHECK(changed == 0);
                CHECK(redis.dump(a.key) == before);
            } else {
                CHECK(changed == 1);  // still in the ring: exactly its own slot
            }
            CHECK(rule_state(redis.numbers(a.key)) == rule_state(redis.numbers(b.key)));
        }
    }
}

TEST_CASE("refund: a token bucket never holds more than its burst") {
    refund_fixture redis;
    layer_spec spec{algorithm::token_bucket, {{3.7, 1 * s, 5, 0}, {20, 10 * s, 10, 0}}, false, 0};
    layer_ref a{"tb:a", &spec}, b{"tb:b", &spec};
    double tc = epoch, at = 0;
    REQUIRE(redis.decide({a}, tc, 3, &at).allowed);
    CHECK(redis.refund({refund_item_of(a, 3, at)}) == 1);
    auto full = rule_state(redis.numbers(a.key));
    CHECK(full == std::vector<double>{5, tc, 10, tc});
    // A second refund of the same request, and a refund larger than the request: still burst.
    CHECK(redis.refund({refund_item_of(a, 3, at)}) == 0);
    REQUIRE(redis.decide({a}, tc, 1, &at).allowed);
    CHECK(redis.refund({refund_item_of(a, 4, at)}) == 1);
    CHECK(rule_state(redis.numbers(a.key)) == full);
    // And it decides as a full bucket does: five at once, not six.
    for (int i = 0; i < 6; ++i)
        CHECK(same(redis.decide({a}, tc, 1), redis.decide({b}, tc, 1)));
    CHECK_FALSE(redis.decide({a}, tc, 1).allowed);
}

TEST_CASE("refund: a bucket that may have hit its cap since the request gives nothing back") {
    // A request R takes 1 at tc from a bucket just below its cap; it refills to the cap; X takes
    // 1 at a later time; then R's refund arrives. The key that never saw R holds what X left:
    // a full refund would give R's permit back a second time (one admission too many). The
    // refund is late (the state's last write is at least cost x interval after tc): nothing.
    refund_fixture redis;
    struct bucket {
        const char* name;
        layer_spec spec;
    };
    const std::vector<bucket> buckets = {
        {"token_bucket", {algorithm::token_bucket, {{1000, 1 * s, 10, 0}}, false, 0}},
        {"leaky_bucket", {algorithm::leaky_bucket, {{1000, 1 * s, 10, 0}}, false, 0}},
        {"gcra", {algorithm::gcra, {{1000, 1 * s, 10, 0}}, false, 0}},
        {"smooth_bursty", {algorithm::smooth_bursty, {{1000, 0.01, 10 * s, 0}}, false, 0}},
    };
    for (const auto& b : buckets) {
        CAPTURE(b.name);
        std::string prefix = std::string("cap:") + b.name;
        layer_ref a{prefix + ":a", &b.spec}, never{prefix + ":b", &b.spec};
        double t0 = epoch, tc = epoch + 1 * s, later = tc + 5'000, at = 0;
        // Both keys: one request well before, so both buckets are (nearly) full at tc.
        REQUIRE(redis.decide({a}, t0, 1).allowed);
        REQUIRE(redis.decide({never}, t0, 1).allowed);
        REQUIRE(redis.decide({a}, tc, 1, &at).allowed);  // R, on a only
        REQUIRE(redis.decide({a}, later, 1).allowed);    // X, 5 ms later: the cap was hit
        REQUIRE(redis.decide({never}, later, 1).allowed);
        CHECK(redis.refund({refund_item_of(a, 1, at)}) == 0);
        // From here both keys decide alike: nothing was given twice.
        for (int i = 0; i < 12; ++i)
            CHECK(same(redis.decide({a}, later, 1), redis.decide({never}, later, 1)));
    }
}

TEST_CASE("refund: Guava layers get time back, never before the consumption, no stored permits") {
    refund_fixture redis;
    SUBCASE("smooth_bursty") {
        layer_spec spec{algorithm::smooth_bursty, {{2.5, 1.5, 10 * s, 0}}, false, 0};
        layer_ref a{"sb:a", &spec};
        double t0 = epoch, tc = epoch + 5 * s, at = 0;
        REQUIRE(redis.decide({a}, t0, 1).allowed);
        // 5 s later 3.75 permits are stored: a cost of 5 spends them and 1.25 fresh ones.
        REQUIRE(redis.decide({a}, tc, 5, &at).allowed);
        CHECK(rule_state(redis.numbers(a.key)) == std::vector<double>{0, tc + 500'000, tc});
        CHECK(redis.refund({refund_item_of(a, 5, at)}) == 1);
        // 2 s of stable-rate time would reach 1.5 s before tc: the ticket stops at tc.
        CHECK(rule_state(redis.numbers(a.key)) == std::vector<double>{0, tc, tc});
        CHECK(redis.refund({refund_item_of(a, 5, at)}) == 0);
    }
    SUBCASE("smooth_warming_up") {
        layer_spec spec{algorithm::smooth_warming_up, {{3, 2 * s, 3, 0}}, false, 0};
        layer_ref a{"sw:a", &spec};
        double tc = epoch, at = 0;
        REQUIRE(redis.decide({a}, tc, 2, &at).allowed);  // cold: 6 stored permits, 2 spent
        auto before = rule_state(redis.numbers(a.key));
        REQUIRE(before.size() == 3);
        CHECK(before[0] == 4);
        CHECK(redis.refund({refund_item_of(a, 2, at)}) == 1);
        auto after = rule_state(redis.numbers(a.key));
        CHECK(after == std::vector<double>{4, before[1] - 666'666, tc});
        CHECK(after[1] > tc);
    }
}

TEST_CASE("refund: a missing, expired, malformed or foreign key is left alone") {
    refund_fixture redis;
    const std::vector<layer_spec> specs = {
        {algorithm::fixed_window, {{5, 1 * s, 0, 0}}, false, 0},
        {algorithm::sliding_window_log, {{5, 1 * s, 0, 0}}, false, 0},
        {algorithm::sliding_window_counter, {{6, 1 * s, 4, 0}}, false, 0},
        {algorithm::leaky_bucket, {{5, 1 * s, 5, 0}}, false, 0},
        {algorithm::token_bucket, {{3.7, 1 * s, 5, 0}}, false, 0},
        {algorithm::gcra, {{3.3, 1 * s, 4, 0}}, false, 0},
        {algorithm::smooth_bursty, {{2.5, 1.5, 10 * s, 0}}, false, 0},
        {algorithm::smooth_warming_up, {{3, 2 * s, 3, 0}}, false, 0},
    };
    // Two rules where the key holds one: a state of the wrong length.
    auto two_rules = [](layer_spec sp) {
        sp.rules.push_back(sp.rules[0]);
        return sp;
    };
    for (const auto& spec : specs) {
        std::string name = to_string(spec.algo);
        CAPTURE(name);
        bool log = spec.algo == algorithm::sliding_window_log;
        layer_ref missing{"m:" + name, &spec};
        CHECK(redis.refund({refund_item_of(missing, 1, epoch)}) == 0);
        CHECK(redis.exec({"EXISTS", missing.key}).integer == 0);

        // Expired: consumed long after the key's state expired (its logical expiry on the
        // limiter clock, not Redis' TTL, which has not run out).
        layer_ref old{"e:" + name, &spec};
        double at = 0;
        REQUIRE(redis.decide({old}, epoch, 1, &at).allowed);
        auto before = redis.dump(old.key);
        CHECK(redis.refund({refund_item_of(old, 1, at + 3600 * s)}) == 0);
        CHECK(redis.dump(old.key) == before);
        // ... while the same refund at its own time does change it (the control).
        CHECK(redis.refund({refund_item_of(old, 1, at)}) == 1);

        if (!log) {
            layer_ref wrong{"l:" + name, &spec};
            REQUIRE(redis.decide({wrong}, epoch, 1, &at).allowed);
            before = redis.dump(wrong.key);
            auto two = two_rules(spec);
            layer_ref longer{wrong.key, &two};
            CHECK(redis.refund({refund_item_of(longer, 1, at)}) == 0);
            CHECK(redis.dump(wrong.key) == before);
        }

        // Garbage of the right type, and a key of the other type.
        layer_ref junk{"j:" + name, &spec};
        if (log)
            redis.exec({"ZADD", junk.key, "1800000000000000", "nonsense"});
        else
            redis.exec({"SET", junk.key, "not a state"});
        before = redis.dump(junk.key);
        CHECK(redis.refund({refund_item_of(junk, 1, epoch)}) == 0);
        CHECK(redis.dump(junk.key) == before);
        layer_ref foreign{"f:" + name, &spec};
        if (log)
            redis.exec({"SET", foreign.key, "a string"});
        else
            redis.exec({"ZADD", foreign.key, "1", "a"});
        before = redis.dump(foreign.key);
        CHECK(redis.refund({refund_item_of(foreign, 1, epoch)}) == 0);
        CHECK(redis.dump(foreign.key) == before);
    }
    // Malformed arguments are an error, before anything is written.
    layer_spec bucket{algorithm::token_bucket, {{1, 1 * s, 5, 0}}, false, 0};
    layer_ref k{"bad:k", &bucket};
    double at = 0;
    REQUIRE(redis.decide({k}, epoch, 1, &at).allowed);
    auto before = redis.dump(k.key);
    auto item = refund_item_of(k, 1, at);
    auto packed = encode_refund_args({item, item});
    std::vector<std::string_view> one_key{k.key};
    for (const std::string& arg :
         {packed, packed.substr(0, packed.size() - 1), encode_refund_args({item}) + "12345678"}) {
        auto r = run(redis.ioc, redis.conn.eval(1, one_key, {arg}));
        REQUIRE_FALSE(r.ec);
        CHECK(r.value.is_error());
    }
    auto unknown = item;
    unknown.algorithm = 9;
    CHECK(redis.refund_reply({item, unknown}).is_error());
    auto negative = item;
    negative.cost = -1;
    CHECK(redis.refund_reply({negative}).is_error());
    CHECK(redis.dump(k.key) == before);
    CHECK(redis.refund({item}) == 1);
}

TEST_CASE("refund: a log refund with later entries only ever over-counts") {
    refund_fixture redis;
    layer_spec spec{algorithm::sliding_window_log, {{4, 1 * s, 0, 0}, {10, 3 * s, 0, 0}}, false, 0};
    layer_ref a{"{g}:a", &spec}, b{"{g}:b", &spec}, wrong{"{g}:wrong", &spec};
    double t0 = epoch;
    // An entry before ours on both, ours (A only), then later entries of the same cost on both.
    for (const auto* k : {&a, &b})
        REQUIRE(redis.decide({*k}, t0, 1).allowed);
    double tc = t0 + 200 * ms, at = 0;
    REQUIRE(redis.decide({a}, tc, 1, &at).allowed);
    for (const auto* k : {&a, &b}) {
        REQUIRE(redis.decide({*k}, tc + 100 * ms, 1).allowed);
        REQUIRE(redis.decide({*k}, tc + 600 * ms, 1).allowed);
    }
    REQUIRE(redis.exec({"ZCARD", a.key}).integer == 4);
    // The control: the newest entry of our cost removed instead (a later request's), the
    // refund that keeps our entry, which leaves the window before that request's would.
    redis.copy(a.key, wrong.key);
    auto newest = redis.exec({"ZRANGE", wrong.key, "-1", "-1"}).elements.at(0).str;
    REQUIRE(redis.exec({"ZREM", wrong.key, newest}).integer == 1);
    CHECK(redis.refund({refund_item_of(a, 1, at)}) == 1);
    REQUIRE(redis.exec({"ZCARD", a.key}).integer == 3);
    // Probes on copies (a decision writes): at each time and cost, A admits only what the
    // never-came key B admits, and never reports more left.
    int probes = 0, stricter = 0, more_permissive = 0, wrong_more_permissive = 0;
    for (double t = tc; t <= tc + 4500 * ms; t += 50 * ms) {
        for (double cost : {1.0, 2.0, 3.0}) {
            redis.copy(a.key, "{g}:pa");
            redis.copy(b.key, "{g}:pb");
            redis.copy(wrong.key, "{g}:pw");
            auto da = redis.decide({{"{g}:pa", &spec}}, t, cost);
            auto db = redis.decide({{"{g}:pb", &spec}}, t, cost);
            auto dw = redis.decide({{"{g}:pw", &spec}}, t, cost);
            auto looser = [&](const chain_decision& x) {
                return (x.allowed && !db.allowed) ||
                       (x.allowed == db.allowed && x.remaining > db.remaining);
            };
            ++probes;
            if (looser(da)) {
                if (++more_permissive <= 3)
                    FAIL_CHECK("at +" << (t - tc) << " µs cost " << cost << "\n  refunded: "
                                      << describe(da) << "\n  never came: " << describe(db));
            }
            stricter += !same(da, db);
            wrong_more_permissive += looser(dw);
        }
    }
    CHECK(more_permissive == 0);
    CHECK(wrong_more_permissive > 0);  // the probes see an under-count
    MESSAGE("log refund: " << probes << " probes, " << stricter
                           << " stricter than the never-came key (over-count)");
}
