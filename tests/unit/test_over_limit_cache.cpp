// The over-limit cache against the backend it stands in front of: on random floods over every
// algorithm, each answer the cache gives is the decision the backend gives for that request
// (here the in-process twin plays Redis; tests/integration/test_replay.py does it on Redis).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "config/config.hpp"
#include "limiters/local/local_store.hpp"
#include "limiters/local/over_limit_cache.hpp"
#include "limiters/policy.hpp"
#include "limiters/redis/chain_codec.hpp"

using namespace rategate::limiters;

namespace {

std::shared_ptr<const rategate::config::config> flood_config() {
    return rategate::config::parse_config(R"({
      "listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "limiters": {
        "global-tb": { "scope": "global", "algorithm": "token_bucket",
                       "rules": [{ "rate": 300, "period": "1s", "burst": 60 }] },
        "route-swc": { "scope": "route", "algorithm": "sliding_window_counter",
                       "rules": [{ "limit": 40, "window": "1s", "buckets": 8 }] },
        "user-log": { "scope": "user", "algorithm": "sliding_window_log",
                      "rules": [{ "limit": 5, "window": "700ms" }] },
        "user-log2": { "scope": "user", "algorithm": "sliding_window_log",
                       "rules": [{ "limit": 3, "window": "300ms" }, { "limit": 8, "window": "3s" }] },
        "ip-fw": { "scope": "ip", "algorithm": "fixed_window", "rules": [{ "limit": 9, "window": "1s" }] },
        "user-gcra": { "scope": "user", "algorithm": "gcra",
                       "rules": [{ "rate": 7, "period": "1s", "burst": 4 }] },
        "ip-leaky": { "scope": "ip", "algorithm": "leaky_bucket",
                      "rules": [{ "rate": 3, "period": "700ms", "capacity": 6 }] },
        "user-bursty": { "scope": "user", "algorithm": "smooth_bursty",
                         "rules": [{ "rate": 4, "max_burst_seconds": 1 }] },
        "ip-tb": { "scope": "ip", "algorithm": "token_bucket", "per_route": true,
                   "rules": [{ "rate": 3, "period": "1s", "burst": 2 }, { "rate": 20, "period": "10s", "burst": 6 }] },
        "user-warm": { "scope": "user", "algorithm": "smooth_warming_up",
                       "rules": [{ "rate": 5, "warmup_period": "1s" }] },
        "route-quota": { "scope": "route", "algorithm": "fixed_window",
                         "rules": [{ "limit": 4, "window": "5s" }] }
      },
      "routes": [
        { "name": "a", "match": { "path": "/a" }, "upstream": "u",
          "limiters": ["global-tb", "route-swc", "user-log", "ip-fw"] },
        { "name": "b", "match": { "path": "/b" }, "upstream": "u", "cost": 2,
          "limiters": ["global-tb", "user-gcra", "ip-leaky"] },
        { "name": "c", "match": { "path": "/c" }, "upstream": "u", "limiters": ["user-bursty", "ip-tb"] },
        { "name": "d", "match": { "path": "/d" }, "upstream": "u", "limiters": ["user-warm"] },
        { "name": "e", "match": { "path": "/e" }, "upstream": "u", "cost": 3,
          "limiters": ["user-log", "ip-fw"] },
        { "name": "f", "match": { "path": "/f" }, "upstream": "u", "limiters": ["user-log2", "ip-leaky"] },
        { "name": "g", "match": { "path": "/g" }, "upstream": "u", "limiters": ["route-quota", "user-gcra"] }
      ]
    })",
                                          "flood.json");
}

std::string describe(const chain_decision& d) {
    std::ostringstream o;
    o << "allowed=" << d.allowed << " decider=" << d.decider << " retry=" << d.retry_us
      << " header=" << d.header_layer << " remaining=" << d.remaining << " reset=" << d.reset_us
      << " rule=" << d.rule << " wait=" << d.wait_us << " shadow=" << d.shadow_mask;
    return o.str();
}

}  // namespace

TEST_CASE("over-limit cache: every cached answer is the backend's decision, on random floods") {
    auto cfg = flood_config();
    policy pol(*cfg);
    std::size_t hits = 0, rejections = 0, requests = 0, named_own = 0;
    for (unsigned seed = 1; seed <= 12; ++seed) {
        local_store backend;
        over_limit_cache cache(seed % 4 == 0 ? 3 : 1000);  // a tiny one evicts all the time
        std::mt19937_64 rnd(seed);
        double now = 1.7e15;
        policy::request_keys keys;
        for (int i = 0; i < 4000; ++i) {
            auto step = rnd() % 100;
            now += step < 85   ? static_cast<double>(rnd() % 2000)
                   : step < 98 ? static_cast<double>(rnd() % 100000)
                               : static_cast<double>(rnd() % 2000000);
            auto route = static_cast<std::size_t>(rnd() % cfg->routes.size());
            std::string user = "u" + std::to_string(rnd() % 3);
            std::string ip = "10.0.0." + std::to_string(rnd() % 3);
            identity who{std::string_view(user), ip, {}};
            pol.keys_for(route, who, keys);
            REQUIRE(!keys.refs.empty());
            auto cost = static_cast<double>(cfg->routes[route].cost);
            if (rnd() % 50 == 0) cost = 1;  // a trace may cost less than its route
            ++requests;
            auto hit = cache.lookup(keys.layers, keys.refs, now, cost);
            auto d = backend.decide(keys.refs, now, cost);
            for (double* x : {&d.retry_us, &d.remaining, &d.reset_us, &d.wait_us})
                *x = reply_number(*x);
            if (!d.allowed) ++rejections;
            if (hit) {
                ++hits;
                INFO("seed " << seed << " request " << i << " route " << cfg->routes[route].name
                             << "\n  backend: " << describe(d)
                             << "\n  cache:   " << describe(*hit));
                REQUIRE(!d.allowed);  // the verdict is always the backend's
                REQUIRE(hit->wait_us == d.wait_us);
                REQUIRE(hit->shadow_mask == d.shadow_mask);
                if (hit->decider != d.decider) {
                    // SPEC 2's latitude: the backend names a shared layer (global, route)
                    // rejecting with a later retry; the cache names the client's own layer,
                    // and its Retry-After is never later than the backend's.
                    ++named_own;
                    REQUIRE(over_limit_cache::is_shared(
                        *keys.layers[static_cast<std::size_t>(d.decider)]));
                    REQUIRE_FALSE(over_limit_cache::is_shared(
                        *keys.layers[static_cast<std::size_t>(hit->decider)]));
                    REQUIRE(hit->retry_us <= d.retry_us);
                    REQUIRE(hit->header_layer == hit->decider);
                    continue;
                }
                REQUIRE(hit->header_layer == d.header_layer);
                REQUIRE(hit->retry_us == d.retry_us);
                REQUIRE(hit->remaining == d.remaining);
                REQUIRE(hit->reset_us == d.reset_us);
                REQUIRE(hit->rule == d.rule);
                continue;
            }
            decided_state s;
            if (!d.allowed) {
                const auto& key = keys.refs[static_cast<std::size_t>(d.decider)].key;
                if (auto st = backend.peek(key, now, &s.expiry_us)) {
                    s.present = true;
                    s.state = *st;
                    if (!s.state.log.empty()) s.expiry_us = std::numeric_limits<double>::infinity();
                }
            }
            cache.learn(keys.layers, keys.refs, d, s, 0);
            CHECK(cache.size() <= cache.capacity());
        }
    }
    MESSAGE(requests << " requests, " << rejections << " rejected, " << hits
                     << " answered by the cache, " << named_own
                     << " naming the client's layer where the backend named a shared one");
    CHECK(rejections > requests / 3);
    // Where no other layer of the client's own could out-wait the rejecting one: route "d"
    // always, "b", "c", "e", "f", "g" for their longer retries, "a" never (its ip window
    // could wait 1 s); "g" also where its shared quota rejects with a later retry.
    CHECK(hits > rejections / 8);
    CHECK(named_own > 0);
}

TEST_CASE("over-limit cache: chains it must not answer") {
    auto cfg = rategate::config::parse_config(R"({
      "listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "limiters": {
        "user": { "scope": "user", "algorithm": "fixed_window", "rules": [{ "limit": 1, "window": "10s" }] },
        "off": { "scope": "user", "algorithm": "fixed_window", "cache": false,
                 "rules": [{ "limit": 1, "window": "10s" }] },
        "leased": { "scope": "global", "algorithm": "token_bucket", "sync": { "lease": 5 },
                    "rules": [{ "rate": 1, "period": "60s", "burst": 5 }] },
        "shadow": { "scope": "ip", "algorithm": "fixed_window", "mode": "shadow",
                    "rules": [{ "limit": 1, "window": "1s" }] },
        "paced": { "scope": "ip", "algorithm": "token_bucket", "delay": "100ms",
                   "rules": [{ "rate": 1, "period": "1s", "burst": 100 }] },
        "long": { "scope": "global", "algorithm": "fixed_window", "rules": [{ "limit": 1000, "window": "1h" }] },
        "long-ip": { "scope": "ip", "algorithm": "fixed_window", "rules": [{ "limit": 1000, "window": "1h" }] }
      },
      "routes": [
        { "name": "shadowed", "match": { "path": "/s" }, "upstream": "u", "limiters": ["user", "shadow"] },
        { "name": "paced", "match": { "path": "/p" }, "upstream": "u", "limiters": ["user", "paced"] },
        { "name": "off", "match": { "path": "/o" }, "upstream": "u", "limiters": ["off"] },
        { "name": "leased", "match": { "path": "/l" }, "upstream": "u", "limiters": ["leased"] },
        { "name": "outwaited", "match": { "path": "/w" }, "upstream": "u", "limiters": ["long-ip", "user"] },
        { "name": "quota", "match": { "path": "/q" }, "upstream": "u", "limiters": ["long", "user"] },
        { "name": "plain", "match": { "path": "/x" }, "upstream": "u", "limiters": ["user"] }
      ]
    })",
                                              "c.json");
    policy pol(*cfg);
    identity who{std::string_view("u1"), "10.0.0.1", {}};
    auto keys_of = [&](const char* route) {
        policy::request_keys k;
        pol.keys_for(static_cast<std::size_t>(pol.route_index(route)), who, k);
        return k;
    };
    CHECK_FALSE(over_limit_cache::eligible(keys_of("shadowed").layers));
    CHECK_FALSE(over_limit_cache::eligible(keys_of("paced").layers));
    CHECK_FALSE(over_limit_cache::eligible(keys_of("off").layers));
    CHECK(over_limit_cache::eligible(keys_of("plain").layers));

    local_store backend;
    over_limit_cache cache(100);
    double now = 1.7e15;
    auto learn = [&](const char* route) {
        auto k = keys_of(route);
        auto d = backend.decide(k.refs, now, 1);
        decided_state s;
        if (!d.allowed) {
            s.state =
                *backend.peek(k.refs[static_cast<std::size_t>(d.decider)].key, now, &s.expiry_us);
            s.present = true;
        }
        cache.learn(k.layers, k.refs, d, s, 0);
        return d;
    };
    CHECK(learn("off").allowed);
    CHECK_FALSE(learn("off").allowed);
    CHECK(cache.size() == 0);  // "cache": false
    // A leased layer's refusal: another loop's idle give-back may put permits back, so its
    // state is not frozen.
    for (int i = 0; i < 5; ++i)
        CHECK(learn("leased").allowed);
    CHECK_FALSE(learn("leased").allowed);
    CHECK(cache.size() == 0);
    CHECK(learn("plain").allowed);
    CHECK_FALSE(learn("plain").allowed);
    CHECK(cache.size() == 1);
    auto plain = keys_of("plain");
    CHECK(cache.lookup(plain.layers, plain.refs, now + 1000, 1).has_value());
    // The same key behind a layer of the client's own that may reject for up to an hour: its
    // retry could be the longer one, so the cache cannot say which layer Redis would name.
    auto outwaited = keys_of("outwaited");
    CHECK_FALSE(cache.lookup(outwaited.layers, outwaited.refs, now + 1000, 1).has_value());
    // Behind a shared quota (global, one hour) it answers, naming the user's layer (SPEC 2's
    // latitude): a flooding client costs Redis nothing whatever the shared layers' bounds.
    auto quota = keys_of("quota");
    auto named = cache.lookup(quota.layers, quota.refs, now + 1000, 1);
    REQUIRE(named.has_value());
    CHECK_FALSE(named->allowed);
    CHECK(named->decider == 1);
    CHECK(named->retry_us == doctest::Approx(10e6 - 1000).epsilon(1e-3));
    // Once the window has passed, the entry is stale and dropped.
    CHECK_FALSE(cache.lookup(plain.layers, plain.refs, now + 10e6, 1).has_value());
    CHECK(cache.size() == 0);
}
