// The give-back script (limiters/lua/give_back/give_back.lua) on a real redis-server against its
// C++ twin (give_back_permits, through local_store::give_back): leased token buckets and fixed
// windows driven by random leased chains, given back random permits at random times, keep the
// same state and give the same decisions and grants in Lua and C++.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <random>

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
using rategate::test::run;
using rategate::test::s;
using rategate::test::same;

namespace {

// A connection with the chain script (index 0) and the give-back script (index 1) loaded, as
// the single-server backend loads them, on a fresh redis-server.
struct give_back_fixture : rategate::test::scripted_redis {
    give_back_fixture()
        : scripted_redis({{"chain", std::string(chain_script())},
                          {"give back", std::string(give_back_script())}}) {}
    chain_decision decide(const std::vector<layer_ref>& chain, double now, double cost,
                          std::vector<lease_grant>& grants) {
        auto leased = lease_counts({{&chain, cost}});
        std::vector<chain_decision> out;
        REQUIRE(decode_batch(chain_call({{&chain, cost}}, now), out, nullptr, nullptr, &leased,
                             &grants));
        return out.at(0);
    }
    // The script's count of keys changed.
    long long give_back(const std::vector<lease_return>& items) {
        std::vector<std::string_view> keys;
        for (const auto& r : items)
            keys.push_back(r.key);
        std::string packed = encode_give_back_args(items);
        auto reply = call(1, keys, {packed}, "give-back");
        REQUIRE(reply.type == redis::reply::kind::integer);
        return reply.integer;
    }
    // The state numbers stored at `key` (without the two expiry fields); empty when none.
    std::vector<double> state(const std::string& key) {
        auto r = run(ioc, conn.exec(redis::command("GET", key)));
        REQUIRE_FALSE(r.ec);
        if (r.value.type != redis::reply::kind::string) return {};
        std::vector<double> v(r.value.str.size() / sizeof(double));
        std::memcpy(v.data(), r.value.str.data(), v.size() * sizeof(double));
        v.resize(v.size() - 2);
        return v;
    }
};

}  // namespace

TEST_CASE(
    "parity: a lease's permits given back change Lua's and C++'s states alike (token bucket "
    "tokens capped at burst, a fixed window's count in its own window only)") {
    give_back_fixture redis;
    layer_spec bucket{
        algorithm::token_bucket, {{37, 1 * s, 40, 0}, {200, 60 * s, 90, 0}}, false, 0};
    layer_spec window{algorithm::fixed_window, {{25, 1 * s, 0, 0}, {120, 10 * s, 0, 0}}, false, 0};
    layer_spec user{algorithm::token_bucket, {{2, 1 * s, 4, 0}}, false, 0};
    local_store twin;
    std::mt19937_64 rng(4242);
    double now = epoch + static_cast<double>(rng() % 1'000'000'000);
    std::vector<double> granted_at = {now, now};  // per leased key: the last grant's time
    int mismatches = 0, given = 0, changed = 0, windows_missed = 0, capped = 0;
    auto check_state = [&](const std::string& key, int round) {
        auto want = twin.peek(key, -1e300);  // the stored state, however old
        auto got = redis.state(key);
        if (!want) {
            if (!got.empty() && ++mismatches <= 5) FAIL_CHECK("round " << round << " " << key);
            return;
        }
        if (want->values != got && ++mismatches <= 5)
            FAIL_CHECK("round " << round << " " << key << ": states differ");
    };
    for (int round = 0; round < 2000; ++round) {
        now += static_cast<double>(rng() % 300'000);
        if (rng() % 3) {
            // A request over both leased layers and a user, each leased layer asking a lease.
            std::vector<layer_ref> chain;
            double cost = static_cast<double>(1 + rng() % 2);
            for (const auto* spec : {&bucket, &window}) {
                double need = static_cast<double>(rng() % 2) * cost;
                chain.push_back({spec == &bucket ? "g:b" : "g:w",
                                 spec,
                                 {need, need + static_cast<double>(1 + rng() % 12)}});
            }
            chain.push_back({"g:u" + std::to_string(rng() % 4), &user});
            std::vector<lease_grant> got_grants, want_grants;
            auto got = redis.decide(chain, now, cost, got_grants);
            chain_decision want = twin.decide(chain, now, cost, &want_grants);
            want.wait_us = static_cast<double>(static_cast<long long>(want.wait_us));
            want.retry_us = static_cast<double>(static_cast<long long>(want.retry_us));
            want.remaining = static_cast<double>(static_cast<long long>(want.remaining));
            want.reset_us = static_cast<double>(static_cast<long long>(want.reset_us));
            if (!same(want, got) && ++mismatches <= 5)
                FAIL_CHECK("round " << round << "\n  C++: " << describe(want)
                                    << "\n  Lua: " << describe(got));
            REQUIRE(got_grants.size() == 2);
            for (std::size_t k = 0; k < 2; ++k) {
                if (got_grants[k].granted != want_grants.at(k).granted && ++mismatches <= 5)
                    FAIL_CHECK("round " << round << ": grants differ");
                if (got_grants[k].granted > 0) granted_at[k] = now;
            }
        } else {
            // Give back to one or both leased keys: permits up to 15, granted at the last grant
            // or up to 12 s before it (an older window: nothing changes).
            std::vector<lease_return> items;
            for (std::size_t k = 0; k < 2; ++k) {
                if (rng() % 3 == 0) continue;
                double at =
                    granted_at[k] - (rng() % 4 == 0 ? static_cast<double>(rng() % 12'000'000) : 0);
                items.push_back({k == 0 ? "g:b" : "g:w", k == 0 ? &bucket : &window,
                                 static_cast<double>(rng() % 16), at});
            }
            if (items.empty()) continue;
            long long want_changed = 0;
            for (const auto& r : items) {
                auto before = twin.peek(r.key, -1e300);
                bool did = twin.give_back(r.key, *r.spec, r.permits, r.granted_at_us);
                want_changed += did;
                if (r.spec == &window && !did && r.permits > 0 && before) ++windows_missed;
                if (r.spec == &bucket && before && r.permits > 0) {
                    auto after = twin.peek(r.key, -1e300);
                    if (after->values[0] == bucket.rules[0][2]) ++capped;
                }
            }
            auto got_changed = redis.give_back(items);
            given += static_cast<int>(items.size());
            changed += static_cast<int>(got_changed);
            CHECK(got_changed == want_changed);
        }
        check_state("g:b", round);
        check_state("g:w", round);
    }
    CHECK(mismatches == 0);
    MESSAGE("give-back parity: " << given << " give-backs, " << changed << " changed a key, "
                                 << windows_missed << " in a window gone, " << capped
                                 << " left a bucket at its burst");
    CHECK(changed > 200);
    CHECK(windows_missed > 20);
    CHECK(capped > 20);
}
