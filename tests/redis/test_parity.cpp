// The Lua chain script on a real redis-server against the in-process twins: identical
// decisions on random traces (10,000 per algorithm), batches, the chain rule read back from
// Redis, TTLs, and hostile user ids.
#include <doctest/doctest.h>

#include <chrono>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "limiters/keys.hpp"
#include "limiters/redis/connection.hpp"
#include "limiters/redis/redis_chain.hpp"
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

// A connection with the chain script loaded, on a fresh redis-server.
struct redis_fixture : rategate::test::scripted_redis {
    redis_fixture() : scripted_redis({{"chain", std::string(chain_script())}}) {}
    std::vector<chain_decision> decide(
        const std::vector<std::pair<const std::vector<layer_ref>*, double>>& reqs, double now) {
        std::vector<chain_decision> out;
        REQUIRE(decode_batch(chain_call(reqs, now), out));
        return out;
    }
    chain_decision decide(const std::vector<layer_ref>& layers, double now, double cost) {
        return decide({{&layers, cost}}, now).at(0);
    }
    // A batch whose chains may hold leased layers: the decisions and every lease record.
    std::vector<chain_decision> decide_leased(
        const std::vector<std::pair<const std::vector<layer_ref>*, double>>& reqs, double now,
        std::vector<lease_grant>& grants) {
        auto leased = lease_counts(reqs);
        std::vector<chain_decision> out;
        REQUIRE(decode_batch(chain_call(reqs, now), out, nullptr, nullptr, &leased, &grants));
        return out;
    }
};

// The twin's decision as the script reports it (integers, truncated like Redis does).
chain_decision as_reported(chain_decision d) {
    d.wait_us = static_cast<double>(static_cast<long long>(d.wait_us));
    d.retry_us = static_cast<double>(static_cast<long long>(d.retry_us));
    d.remaining = static_cast<double>(static_cast<long long>(d.remaining));
    d.reset_us = static_cast<double>(static_cast<long long>(d.reset_us));
    return d;
}

struct algo_case {
    algorithm algo;
    std::vector<rule_params> rules;
};

std::vector<algo_case> cases() {
    return {
        {algorithm::fixed_window, {{5, 1 * s, 0, 0}, {20, 10 * s, 0, 0}}},
        {algorithm::sliding_window_log, {{5, 1 * s, 0, 0}, {12, 5 * s, 0, 0}}},
        {algorithm::sliding_window_counter, {{6, 1 * s, 4, 0}, {20, 5 * s, 5, 0}}},
        {algorithm::leaky_bucket, {{5, 1 * s, 5, 0}, {1.5, 1 * s, 3, 0}}},
        {algorithm::token_bucket, {{3.7, 1 * s, 5, 0}, {20, 10 * s, 10, 0}}},
        {algorithm::gcra, {{3.3, 1 * s, 4, 0}, {7, 2 * s, 9, 0}}},
        {algorithm::smooth_bursty, {{2.5, 1.5, 10 * s, 0}, {7, 1, 3 * s, 0}}},
        {algorithm::smooth_warming_up, {{3, 2 * s, 3, 0}, {10, 1 * s, 2.5, 0}}},
    };
}

}  // namespace

TEST_CASE("parity: Lua and C++ give identical decisions on random traces (10,000 per algorithm)") {
    redis_fixture redis;
    for (const auto& c : cases()) {
        std::string name = to_string(c.algo);
        CAPTURE(name);
        layer_spec plain{c.algo, c.rules, false, 0};
        layer_spec delayed{c.algo, c.rules, false, 300 * ms};
        layer_spec shadow{c.algo, {c.rules[0]}, true, 0};
        local_store twin;
        std::mt19937_64 rng(static_cast<unsigned>(c.algo) * 7919 + 1);
        std::string prefix = std::string("parity:") + to_string(c.algo) + ":";
        // Chains per key: an enforced layer (half of them in delay mode) and a shadow layer.
        std::vector<std::vector<layer_ref>> chains;
        for (int k = 0; k < 24; ++k)
            chains.push_back({{prefix + "e" + std::to_string(k), k % 2 ? &delayed : &plain},
                              {prefix + "s" + std::to_string(k), &shadow}});
        double now = epoch + static_cast<double>(rng() % 1'000'000'000);
        int mismatches = 0, allowed = 0;
        for (int i = 0; i < 10'000; ++i) {
            auto pick = rng() % 100;
            if (pick < 40) {
            } else if (pick < 75) {
                now += static_cast<double>(rng() % 50'000);
            } else if (pick < 95) {
                now += static_cast<double>(rng() % 3'000'000);
            } else {
                now -= static_cast<double>(rng() % 200'000);  // the clock steps back
            }
            const auto& chain = chains[rng() % (pick < 40 ? 3 : chains.size())];
            double cost = rng() % 20 == 0 ? 12 : static_cast<double>(1 + rng() % 3);
            auto expected = as_reported(twin.decide(chain, now, cost));
            auto got = redis.decide(chain, now, cost);
            allowed += got.allowed;
            if (!same(expected, got) && ++mismatches <= 5)
                FAIL_CHECK("decision " << i << " at " << std::fixed << now << " cost " << cost
                                       << "\n  C++: " << describe(expected)
                                       << "\n  Lua: " << describe(got));
        }
        CHECK(mismatches == 0);
        MESSAGE(name << ": 10000 decisions, " << allowed << " allowed, " << mismatches
                     << " mismatches");
        CHECK(allowed > 500);
        CHECK(allowed < 9500);
    }
}

TEST_CASE("parity: one call deciding a batch equals the same requests decided one by one") {
    redis_fixture redis;
    layer_spec global{algorithm::token_bucket, {{50, 1 * s, 40, 0}}, false, 0};
    layer_spec route{algorithm::sliding_window_log, {{30, 1 * s, 0, 0}}, false, 0};
    layer_spec user{algorithm::gcra, {{2, 1 * s, 3, 0}}, false, 0};
    std::vector<std::vector<layer_ref>> chains;
    for (int u = 0; u < 10; ++u)
        chains.push_back(
            {{"b:global", &global}, {"b:route", &route}, {"b:user:" + std::to_string(u), &user}});
    local_store twin;
    double now = epoch;
    for (int round = 0; round < 20; ++round) {
        now += 150 * ms;
        std::vector<std::pair<const std::vector<layer_ref>*, double>> batch;
        for (int i = 0; i < 64; ++i)
            batch.push_back({&chains[(i * 7 + round) % 10], 1});
        auto got = redis.decide(batch, now);
        REQUIRE(got.size() == 64);
        for (int i = 0; i < 64; ++i) {
            auto expected = as_reported(twin.decide(*batch[i].first, now, 1));
            REQUIRE_MESSAGE(same(expected, got[i]), "round " << round << " request " << i
                                                             << "\n  C++: " << describe(expected)
                                                             << "\n  Lua: " << describe(got[i]));
        }
    }
}

TEST_CASE(
    "parity: leased layers take the same grants and give the same decisions in Lua and "
    "C++ (random asks, batches of up to 8)") {
    // SPEC §2 `sync`: a leased layer decides its `need` and takes up to `want` at once, kept
    // whatever the exact layers decide. Twins: the leased branches of decide_chain and
    // limiters/lua/90_chain.lua.
    redis_fixture redis;
    layer_spec global{
        algorithm::token_bucket, {{37, 1 * s, 40, 0}, {200, 60 * s, 90, 0}}, false, 0};
    layer_spec route{algorithm::fixed_window, {{25, 1 * s, 0, 0}, {120, 10 * s, 0, 0}}, false, 0};
    layer_spec user{algorithm::token_bucket, {{2, 1 * s, 4, 0}}, false, 0};
    layer_spec ip{algorithm::sliding_window_log, {{6, 2 * s, 0, 0}}, false, 0};
    local_store twin;
    std::mt19937_64 rng(2020);
    double now = epoch + static_cast<double>(rng() % 1'000'000'000);
    int mismatches = 0, allowed = 0, granted = 0, refused_with_grant = 0;
    for (int round = 0; round < 1500; ++round) {
        auto pick = rng() % 100;
        if (pick < 50)
            now += static_cast<double>(rng() % 40'000);
        else if (pick < 90)
            now += static_cast<double>(rng() % 900'000);
        else
            now -= static_cast<double>(rng() % 100'000);  // the clock steps back
        // Up to 8 requests in one call; each chain has its own copy (asks differ per request).
        std::vector<std::vector<layer_ref>> chains(1 + rng() % 8);
        std::vector<std::pair<const std::vector<layer_ref>*, double>> batch;
        for (auto& c : chains) {
            double cost = static_cast<double>(1 + rng() % 3);
            auto ask = [&]() -> lease_ask {
                if (rng() % 4 == 0) return {};  // exact this time
                double need = static_cast<double>(rng() % 4) * (rng() % 3 == 0 ? 0 : 1);
                return {need, need + static_cast<double>(rng() % 30)};
            };
            c.push_back({"l:global", &global, ask()});
            if (rng() % 2) c.push_back({"l:route", &route, ask()});
            c.push_back({"l:u" + std::to_string(rng() % 5), &user});
            if (rng() % 3 == 0) c.push_back({"l:ip" + std::to_string(rng() % 3), &ip});
            // An ask with want > 0 but need == want == 0 is not an ask: keep want > need or 0.
            for (auto& l : c)
                if (l.lease.want == 0) l.lease = {};
            batch.push_back({&c, cost});
        }
        std::vector<lease_grant> got_grants;
        auto got = redis.decide_leased(batch, now, got_grants);
        REQUIRE(got.size() == batch.size());
        std::vector<lease_grant> expected_grants;
        for (std::size_t i = 0; i < batch.size(); ++i) {
            auto expected =
                as_reported(twin.decide(*batch[i].first, now, batch[i].second, &expected_grants));
            allowed += got[i].allowed;
            if (!same(expected, got[i]) && ++mismatches <= 5)
                FAIL_CHECK("round " << round << " request " << i << "\n  C++: "
                                    << describe(expected) << "\n  Lua: " << describe(got[i]));
        }
        REQUIRE(got_grants.size() == expected_grants.size());
        std::size_t g = 0;
        for (std::size_t i = 0; i < batch.size(); ++i)
            for (const auto& l : *batch[i].first) {
                if (l.lease.want <= 0) continue;
                const auto &e = expected_grants[g], &a = got_grants[g];
                ++g;
                granted += a.granted > 0;
                if (a.granted > l.lease.need && !got[i].allowed) ++refused_with_grant;
                if ((e.granted != a.granted || e.remaining != a.remaining ||
                     e.reset_us != a.reset_us || e.rule != a.rule) &&
                    ++mismatches <= 5)
                    FAIL_CHECK("round " << round << " request " << i << " " << l.key
                                        << ": C++ grant " << e.granted << " rem " << e.remaining
                                        << " reset " << e.reset_us << " rule " << e.rule
                                        << "; Lua grant " << a.granted << " rem " << a.remaining
                                        << " reset " << a.reset_us << " rule " << a.rule);
                // A grant covers the need and never exceeds the ask.
                CHECK((a.granted == 0 || (a.granted >= l.lease.need && a.granted <= l.lease.want)));
            }
    }
    CHECK(mismatches == 0);
    MESSAGE("leased parity: " << allowed << " allowed, " << granted << " grants, "
                              << refused_with_grant << " kept by requests an exact layer refused");
    CHECK(allowed > 300);
    CHECK(granted > 300);
    CHECK(refused_with_grant > 10);
}

TEST_CASE(
    "leased layer on Redis: a request an exact layer refuses keeps the lease taken in its "
    "call and consumes nothing else; a lease never takes more than the counter has") {
    redis_fixture redis;
    layer_spec global{algorithm::fixed_window, {{10, 60 * s, 0, 0}}, false, 0};
    layer_spec user{algorithm::fixed_window, {{1, 60 * s, 0, 0}}, false, 0};
    double now = epoch;
    std::vector<layer_ref> first{{"k:g", &global, {1, 4}}, {"k:u", &user}};
    std::vector<lease_grant> grants;
    auto d = redis.decide_leased({{&first, 1}}, now, grants);
    REQUIRE(grants.size() == 1);
    CHECK(d[0].allowed);
    CHECK(grants[0].granted == 4);
    CHECK(grants[0].remaining == 6);
    // The user is over its limit: refused by the exact layer, the grant of 4 is still taken.
    grants.clear();
    d = redis.decide_leased({{&first, 1}}, now, grants);
    CHECK_FALSE(d[0].allowed);
    CHECK(d[0].decider == 1);
    CHECK(grants.at(0).granted == 4);
    CHECK(grants[0].remaining == 2);
    auto user_state = redis.server.cli("GET k:u");
    // A lease asks for 5 with a need of 1: only the 2 left are granted; then the need of 1
    // cannot be met: the leased layer refuses with remaining 0 and takes nothing.
    std::vector<layer_ref> other{{"k:g", &global, {1, 5}}, {"k:v", &user}};
    grants.clear();
    d = redis.decide_leased({{&other, 1}}, now, grants);
    CHECK(d[0].allowed);
    CHECK(grants.at(0).granted == 2);
    grants.clear();
    d = redis.decide_leased({{&other, 1}}, now, grants);
    CHECK_FALSE(d[0].allowed);
    CHECK(d[0].decider == 0);
    CHECK(d[0].remaining == 0);
    CHECK(d[0].retry_us > 0);
    CHECK(grants.at(0).granted == 0);
    CHECK(redis.server.cli("GET k:u") == user_state);
    // A renewal alone (need 0) on an empty counter admits and takes nothing.
    std::vector<layer_ref> renew{{"k:g", &global, {0, 3}}};
    grants.clear();
    d = redis.decide_leased({{&renew, 1}}, now, grants);
    CHECK(d[0].allowed);
    CHECK(grants.at(0).granted == 0);
}

TEST_CASE("chain rule on Redis: a rejection by the last layer leaves every earlier key unchanged") {
    redis_fixture redis;
    layer_spec global{algorithm::token_bucket, {{10, 1 * s, 100, 0}}, false, 0};
    layer_spec route{algorithm::fixed_window, {{100, 60 * s, 0, 0}}, false, 0};
    layer_spec log{algorithm::sliding_window_log, {{100, 60 * s, 0, 0}}, false, 0};
    layer_spec user{algorithm::token_bucket, {{1, 1 * s, 2, 0}}, false, 0};
    std::vector<layer_ref> chain{{"c:g", &global}, {"c:r", &route}, {"c:l", &log}, {"c:u", &user}};
    double now = epoch;
    CHECK(redis.decide(chain, now, 1).allowed);
    CHECK(redis.decide(chain, now, 1).allowed);
    auto g = redis.server.cli("GET c:g"), r = redis.server.cli("GET c:r"),
         l = redis.server.cli("ZCARD c:l");
    auto d = redis.decide(chain, now, 1);
    CHECK_FALSE(d.allowed);
    CHECK(d.decider == 3);
    CHECK(redis.server.cli("GET c:g") == g);
    CHECK(redis.server.cli("GET c:r") == r);
    CHECK(redis.server.cli("ZCARD c:l") == l);
    CHECK(l == "2");
    // Every key carries a TTL.
    for (auto key : {"c:g", "c:r", "c:l", "c:u"})
        CHECK(std::stoll(redis.server.cli(std::string("PTTL ") + key)) > 0);
}

TEST_CASE("key hygiene on Redis: hostile user ids stay isolated") {
    redis_fixture redis;
    layer_spec user{algorithm::fixed_window, {{1, 60 * s, 0, 0}}, false, 0};
    std::vector<std::string> ids = {
        "a:b", "a%3Ab", "{x}", "x", std::string(10 * 1024, 'z'), std::string("\xff\xfe\n\r", 4),
        "",    "u}{v"};
    double now = epoch;
    for (const auto& id : ids) {
        std::vector<layer_ref> chain{
            {layer_key("rategate:", "per-user", "u=" + escape_key_part(id)), &user}};
        CHECK_MESSAGE(redis.decide(chain, now, 1).allowed,
                      "first request of a distinct id must pass");
        CHECK_FALSE(redis.decide(chain, now, 1).allowed);
    }
    CHECK(std::stoll(redis.server.cli("DBSIZE")) == static_cast<long long>(ids.size()));
}

TEST_CASE("clock redis: the script reads TIME when no time is passed") {
    redis_fixture redis;
    layer_spec spec{algorithm::fixed_window, {{2, 3600 * s, 0, 0}}, false, 0};
    std::vector<layer_ref> chain{{"t:k", &spec}};
    auto a = redis.decide(chain, -1, 1);
    auto b = redis.decide(chain, -1, 1);
    auto c = redis.decide(chain, -1, 1);
    CHECK(a.allowed);
    CHECK(b.allowed);
    CHECK_FALSE(c.allowed);
    CHECK(c.retry_us > 0);
    CHECK(c.retry_us <= 3600 * s);
}

TEST_CASE("parity: sliding_window_log at limit 10,000 and exactly at its limit, in batches") {
    redis_fixture redis;
#if defined(__SANITIZE_ADDRESS__)
    // Under ASan the C++ twin (which walks the log) is ~20× slower: the fill would outlast the
    // window in real time. 1,000 keeps the same shape of trace.
    constexpr double big = 1'000;
#else
    constexpr double big = 10'000;
#endif
    for (double limit : {10.0, big}) {
        CAPTURE(limit);
        layer_spec log{algorithm::sliding_window_log,
                       {{limit, 1 * s, 0, 0}, {limit * 1.2, 3 * s, 0, 0}},
                       false,
                       0};
        layer_spec delayed{algorithm::sliding_window_log, {{limit, 1 * s, 0, 0}}, false, 300 * ms};
        std::string prefix = "swl" + std::to_string(static_cast<long long>(limit)) + ":";
        std::vector<std::vector<layer_ref>> chains;
        for (int k = 0; k < 4; ++k)
            chains.push_back({{prefix + std::to_string(k), k % 2 ? &delayed : &log}});
        local_store twin;
        std::mt19937_64 rng(static_cast<unsigned>(limit) + 17);
        double now = epoch;
        int mismatches = 0, allowed = 0, decisions = 0;
        // Fill to the limit in batches of 64 at one time (many entries share a score), then
        // arrive at about twice the limit with costs that land exactly on it.
        // 16 requests per key and call: the fill takes limit / 16 calls 1 ms apart.
        const double step = std::floor(1 * s * 16 / (2 * limit));
        const int fill = static_cast<int>(limit / 16);
        // Keys expire physically in Redis on real time: the virtual clock never lags real time
        // by more than 0.5 s (slow builds), or a key could vanish before its logical expiry.
        const auto started = std::chrono::steady_clock::now();
        for (int call = 0; call < fill + 600; ++call) {
            now += call < fill ? 1000 : step * static_cast<double>(rng() % 3);
            if (rng() % 100 == 0) now -= 20 * ms;  // the clock steps back
            double real = std::chrono::duration<double, std::micro>(
                              std::chrono::steady_clock::now() - started)
                              .count();
            now = std::max(now, epoch + real - 500 * ms);
            std::vector<std::pair<const std::vector<layer_ref>*, double>> batch;
            for (int i = 0; i < 64; ++i)
                batch.push_back({&chains[rng() % chains.size()],
                                 rng() % 10 == 0 ? static_cast<double>(1 + rng() % 4) : 1});
            auto got = redis.decide(batch, now);
            REQUIRE(got.size() == 64);
            for (int i = 0; i < 64; ++i) {
                auto expected = as_reported(twin.decide(*batch[i].first, now, batch[i].second));
                ++decisions;
                allowed += got[i].allowed;
                if (!same(expected, got[i]) && ++mismatches <= 5)
                    FAIL_CHECK("call " << call << " request " << i << " cost " << batch[i].second
                                       << "\n  C++: " << describe(expected)
                                       << "\n  Lua: " << describe(got[i]));
            }
        }
        CHECK(mismatches == 0);
        MESSAGE("limit " << limit << ": " << decisions << " decisions, " << allowed << " allowed, "
                         << mismatches << " mismatches");
        CHECK(allowed > decisions / 10);
        CHECK(allowed < decisions);
    }
}

TEST_CASE("TTL on Redis: kept while it outlives the state, moved when the state would outlive it") {
    redis_fixture redis;
    // The gateway clock runs with real time here, so the limiter clock and Redis' expiry agree.
    layer_spec window{algorithm::fixed_window, {{1000, 200 * ms, 0, 0}}, false, 0};
    layer_spec bucket{algorithm::token_bucket, {{50, 1 * s, 20, 0}}, false, 0};
    std::vector<layer_ref> chain{{"ttl:w", &window}, {"ttl:b", &bucket}};
    local_store twin;
    auto start = std::chrono::steady_clock::now();
    auto clock = [&] {
        return epoch + static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(
                                               std::chrono::steady_clock::now() - start)
                                               .count());
    };
    auto get = [&](const std::string& cmd, const std::string& key) {
        auto r = run(redis.ioc, redis.conn.exec(rategate::limiters::redis::command(cmd, key)));
        REQUIRE_FALSE(r.ec);
        return r.value;
    };
    int kept = 0, moved = 0, mismatches = 0;
    std::map<std::string, long long> last_pttl;
    while (std::chrono::steady_clock::now() - start < 1600ms) {
        double now = clock();
        auto expected = as_reported(twin.decide(chain, now, 1));
        auto got = redis.decide(chain, now, 1);
        mismatches += !same(expected, got);
        for (const auto& l : chain) {
            auto v = get("GET", l.key).str;
            REQUIRE(v.size() >= 24);
            double expires = 0;
            std::memcpy(&expires, v.data() + v.size() - 8, 8);
            long long pttl = get("PTTL", l.key).integer;
            // Every key has a TTL, never shorter than its state's life (1 ms of rounding).
            REQUIRE(pttl > 0);
            CHECK(static_cast<double>(pttl) * 1000 + 1000 >= expires - clock());
            if (last_pttl.count(l.key)) (pttl > last_pttl[l.key] ? moved : kept) += 1;
            last_pttl[l.key] = pttl;
        }
        std::this_thread::sleep_for(3ms);
    }
    CHECK(mismatches == 0);
    MESSAGE("TTL kept " << kept << " times, moved " << moved << " times");
    CHECK(kept > 10 * moved);
    CHECK(moved >= 2);
}

TEST_CASE("parity at the longest spans the config accepts: no script error, same decisions") {
    // config refuses rules and route costs whose span passes 1e15 us (limiters::max_span_us);
    // past it the script's SET PX failed on every admission. At the bound both twins decide.
    redis_fixture redis;
    constexpr double year = 8760 * 3600 * s;
    struct extreme {
        algorithm algo;
        rule_params rule;
        double cost;
    };
    const extreme cases[] = {
        {algorithm::token_bucket, {1, year, 15, 0}, 15},
        {algorithm::leaky_bucket, {1, year, 15, 0}, 15},
        {algorithm::gcra, {1, year, 15, 0}, 15},
        {algorithm::smooth_bursty, {1e-6, 1, 1e15, 0}, 999},
        {algorithm::smooth_warming_up, {1e-6, 1e14, 1, 0}, 100},
    };
    for (const auto& c : cases) {
        CAPTURE(to_string(c.algo));
        const auto& row = algorithm_facts(c.algo);
        REQUIRE(row.span_us(c.rule, c.cost) <= max_span_us);
        layer_spec spec{c.algo, {c.rule}, false, 0};
        std::vector<layer_ref> chain{{std::string("span:") + to_string(c.algo), &spec}};
        local_store twin;
        double now = epoch;
        for (int i = 0; i < 4; ++i, now += 1000 * s) {
            auto expected = as_reported(twin.decide(chain, now, c.cost));
            auto got = redis.decide(chain, now, c.cost);
            CHECK_MESSAGE(same(expected, got), "decision " << i << "\n  C++: " << describe(expected)
                                                           << "\n  Lua: " << describe(got));
            CHECK(got.allowed == (i == 0));
            CHECK(got.retry_us <= 2 * max_span_us);
        }
    }
}

TEST_CASE("parity: gcra at high rates admits no more than the rate in Lua either (tat precision)") {
    // Before: the TAT was an absolute double (0.25 us steps at this epoch); at 1e7/s each
    // request added 0.1 us that rounded away, and the script admitted all 100 of every batch.
    redis_fixture redis;
    for (double rate : {1e7, 9e5}) {
        CAPTURE(rate);
        layer_spec spec{algorithm::gcra, {{rate, 1 * s, 10, 0}}, false, 0};
        std::vector<layer_ref> chain{{"gcra-fast:" + std::to_string(rate), &spec}};
        local_store twin;
        std::vector<std::pair<const std::vector<layer_ref>*, double>> batch(100, {&chain, 1});
        int admitted = 0, mismatches = 0;
        double now = epoch + 123'457;
        for (int us = 0; us < 200; ++us, now += 1) {  // 100 requests in one call each us
            auto got = redis.decide(batch, now);
            for (const auto& d : got) {
                admitted += d.allowed;
                mismatches += !same(as_reported(twin.decide(chain, now, 1)), d);
            }
        }
        CHECK(mismatches == 0);
        CHECK(admitted <= 10 + rate * 199 / s);
        CHECK(admitted >= 10 + rate * 199 / s - 2);
    }
}
