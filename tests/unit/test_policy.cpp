#include <doctest/doctest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "limiters/keys.hpp"
#include "limiters/policy.hpp"

using namespace rategate::limiters;

namespace {

// Limiters of every identity scope, each with a route that uses only it.
std::shared_ptr<const rategate::config::config> scoped_config() {
    return rategate::config::parse_config(R"({
      "listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "limiters": {
        "user": { "scope": "user", "algorithm": "fixed_window", "rules": [{ "limit": 5, "window": "1s" }] },
        "user-rt": { "scope": "user", "algorithm": "fixed_window", "per_route": true,
                     "rules": [{ "limit": 5, "window": "1s" }] },
        "key": { "scope": "header:X-Key", "algorithm": "fixed_window", "on_missing_key": "anonymous",
                 "rules": [{ "limit": 5, "window": "1s" }] },
        "deny": { "scope": "user", "algorithm": "fixed_window", "on_missing_key": "deny",
                  "rules": [{ "limit": 5, "window": "1s" }] },
        "ip": { "scope": "ip", "algorithm": "fixed_window", "rules": [{ "limit": 5, "window": "1s" }] },
        "ip-grouped": { "scope": "ip", "algorithm": "fixed_window", "ipv4_prefix": 24,
                        "ipv6_prefix": 64, "rules": [{ "limit": 5, "window": "1s" }] }
      },
      "routes": [
        { "name": "user", "match": { "path": "/u" }, "upstream": "u", "limiters": ["user"] },
        { "name": "user-rt", "match": { "path": "/ur" }, "upstream": "u", "limiters": ["user-rt"] },
        { "name": "key", "match": { "path": "/k" }, "upstream": "u", "limiters": ["key"] },
        { "name": "deny-then-key", "match": { "path": "/dk" }, "upstream": "u",
          "limiters": ["deny", "key"] },
        { "name": "user-then-key", "match": { "path": "/uk" }, "upstream": "u",
          "limiters": ["user", "key"] },
        { "name": "ip", "match": { "path": "/i" }, "upstream": "u", "limiters": ["ip", "ip-grouped"] },
        { "name": "free", "match": { "path": "/f" }, "upstream": "u" }
      ]
    })",
                                          "t.json");
}

identity who(std::optional<std::string_view> user, std::string_view ip = "",
             std::optional<std::string_view> key = std::nullopt) {
    // The identity views its header values: each call's stays alive for the whole test run.
    static std::deque<header_value> kept;
    kept.push_back({"X-Key", key});
    return {user, ip, std::span<const header_value>(&kept.back(), 1)};
}

// Values that would collide or break a key if they were not escaped.
std::vector<std::string> hostile_values() {
    std::vector<std::string> v{
        "a",          "A",         "a:b",       "a%3Ab", "a%253Ab", ":",       "{",         "}",
        "{x}",        "}{evil",    "%",         "%25",   "|",       "a|r=key", "a|r%3Dkey", "~",
        "~anonymous", "anonymous", "u=a",       "=",     " ",       "a ",      "\t",        "\r\n",
        "\xff\xfe",   "\xc3\xa9",  "e\xcc\x81", "..",    "-",       "_"};
    v.push_back(std::string("a\0b", 3));
    v.push_back(std::string("a\0c", 3));
    v.push_back(std::string(256, 'x'));
    v.push_back(std::string(255, 'x'));
    return v;
}

void require_one_hash_tag(const std::string& key) {
    CHECK(std::count(key.begin(), key.end(), '{') == 1);
    CHECK(std::count(key.begin(), key.end(), '}') == 1);
    CHECK(key.back() == '}');
}

}  // namespace

TEST_CASE("key hygiene: distinct values give distinct keys with one hash tag") {
    auto values = hostile_values();
    values.push_back(std::string(10 * 1024, '{'));
    values.push_back(std::string(10 * 1024, '}'));
    std::string ten_kb;
    for (int i = 0; i < 10 * 1024; ++i)
        ten_kb += static_cast<char>(i % 256);
    values.push_back(ten_kb);
    std::set<std::string> escaped, keys;
    for (const auto& v : values) {
        auto e = escape_key_part(v);
        CHECK(e.find_first_not_of(
                  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-%") ==
              std::string::npos);
        escaped.insert(e);
        auto k = layer_key("rategate:", "per-user", "u=" + e);
        require_one_hash_tag(k);
        keys.insert(k);
    }
    CHECK(escaped.size() == values.size());
    CHECK(keys.size() == values.size());
}

TEST_CASE("keys_for: hostile user ids and header values never collide") {
    auto cfg = scoped_config();
    policy p(*cfg);
    auto key_of = [&](const char* route, const identity& w) {
        policy::request_keys out;
        p.keys_for(static_cast<std::size_t>(p.route_index(route)), w, out);
        REQUIRE(out.refs.size() == 1);
        REQUIRE_FALSE(out.denied_by);
        REQUIRE_FALSE(out.invalid_by);
        require_one_hash_tag(out.refs[0].key);
        return out.refs[0].key;
    };
    std::set<std::string> keys;
    std::size_t expected = 0;
    for (const auto& v : hostile_values()) {
        keys.insert(key_of("user", who(v)));
        keys.insert(key_of("user-rt", who(v)));
        keys.insert(key_of("key", who(std::nullopt, "", v)));
        expected += 3;
    }
    keys.insert(key_of("key", who(std::nullopt)));  // the anonymous key
    ++expected;
    CHECK(keys.size() == expected);
}

TEST_CASE("keys_for: identities over 256 bytes are invalid, never keys") {
    auto cfg = scoped_config();
    policy p(*cfg);
    auto keys = [&](const char* route, const identity& w) {
        policy::request_keys out;
        p.keys_for(static_cast<std::size_t>(p.route_index(route)), w, out);
        return out;
    };
    std::string ok(max_identity_bytes, 'a'), too_long(max_identity_bytes + 1, 'a');
    CHECK(keys("user", who(ok)).refs.size() == 1);
    auto u = keys("user", who(too_long));
    REQUIRE(u.invalid_by);
    CHECK(u.invalid_by->limiter->name == "user");
    CHECK(u.refs.empty());
    CHECK(u.layers.empty());
    CHECK_FALSE(u.denied_by);

    auto k = keys("key", who(std::nullopt, "", std::string_view(too_long)));
    REQUIRE(k.invalid_by);
    CHECK(k.invalid_by->limiter->name == "key");
    // 10 KB of hostile bytes: invalid too, not a 30 KB key.
    std::string huge(10 * 1024, '\xff');
    CHECK(keys("key", who(std::nullopt, "", std::string_view(huge))).invalid_by);

    // A later layer's invalid identity discards the keys already computed.
    auto uk = keys("user-then-key", who("fine", "", std::string_view(too_long)));
    REQUIRE(uk.invalid_by);
    CHECK(uk.invalid_by->limiter->name == "key");
    CHECK(uk.refs.empty());
    // The first layer that stops the request decides why.
    auto dk = keys("deny-then-key", who(std::nullopt, "", std::string_view(too_long)));
    CHECK(dk.denied_by);
    CHECK_FALSE(dk.invalid_by);
    CHECK(dk.refs.empty());
    // Not used by a limiter of the route: no check.
    CHECK_FALSE(keys("free", who(too_long, "", std::string_view(too_long))).invalid_by);
    CHECK_FALSE(keys("ip", who(too_long, "192.0.2.1", std::string_view(too_long))).invalid_by);
}

TEST_CASE("group_ip: IPv4 by ipv4_prefix, IPv6 by ipv6_prefix") {
    CHECK(group_ip("192.0.2.7", 32, 128) == "192.0.2.7");
    CHECK(group_ip("192.0.2.7", 32, 64) == "192.0.2.7");  // the IPv6 prefix never applies
    CHECK(group_ip("192.0.2.7", 24, 128) == "192.0.2.0/24");
    CHECK(group_ip("192.0.2.200", 25, 128) == "192.0.2.128/25");
    CHECK(group_ip("192.0.2.7", 0, 128) == "0.0.0.0/0");
    CHECK(group_ip("::ffff:192.0.2.7", 32, 64) == "192.0.2.7");  // IPv4-mapped is IPv4
    CHECK(group_ip("::ffff:192.0.2.7", 24, 64) == "192.0.2.0/24");
    CHECK(group_ip("2001:db8:1:2:3:4:5:6", 24, 64) == "2001:db8:1:2::/64");
    CHECK(group_ip("2001:db8:1:2:3:4:5:6", 24, 128) == "2001:db8:1:2:3:4:5:6");
    CHECK(group_ip("2001:db8:1:2:3:4:5:6", 24, 48) == "2001:db8:1::/48");
    CHECK(group_ip("not an ip", 24, 64) == "not an ip");
}

TEST_CASE("keys_for: the ip scope groups IPv4-mapped clients as IPv4") {
    auto cfg = scoped_config();
    policy p(*cfg);
    auto keys = [&](std::string_view ip) {
        policy::request_keys out;
        p.keys_for(static_cast<std::size_t>(p.route_index("ip")), who(std::nullopt, ip), out);
        REQUIRE(out.refs.size() == 2);
        return std::pair{out.refs[0].key, out.refs[1].key};
    };
    auto [a, a_grouped] = keys("198.51.100.7");
    auto [b, b_grouped] = keys("198.51.100.8");
    auto [c, c_grouped] = keys("198.51.101.7");
    CHECK(a != b);
    CHECK(a_grouped == b_grouped);  // one /24
    CHECK(a_grouped != c_grouped);
    auto [d, d_grouped] = keys("2001:db8::1");
    auto [e, e_grouped] = keys("2001:db8::ffff:2");
    CHECK(d != e);
    CHECK(d_grouped == e_grouped);  // one /64
    CHECK(d_grouped != a_grouped);
}

TEST_CASE("key shapes: a layer that reserves (enforced, with a delay) has keys of its own") {
    auto key_of = [](const char* extra) {
        auto cfg = rategate::config::parse_config(std::string(R"({
          "listen": "127.0.0.1:8080",
          "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
          "limiters": { "g": { "scope": "global", "algorithm": "token_bucket",
                               "rules": [{ "rate": 5, "period": "1s", "burst": 10 }])") +
                                                      extra + R"( } },
          "routes": [ { "name": "r", "match": { "path": "/" }, "upstream": "u", "limiters": ["g"] } ]
        })",
                                                  "k.json");
        policy pol(*cfg);
        policy::request_keys keys;
        pol.keys_for(0, identity{}, keys);
        REQUIRE(keys.refs.size() == 1);
        return keys.refs[0].key;
    };
    auto plain = key_of("");
    // Debt reserved under a delay must not meet a shape whose retry bounds assume none.
    CHECK(key_of(R"(, "delay": "500ms")") != plain);
    CHECK(key_of(R"(, "delay": "500ms")") == key_of(R"(, "delay": "2s")"));  // only whether
    CHECK(key_of(R"(, "delay": "500ms", "mode": "shadow")") == plain);  // shadow never reserves
    CHECK(key_of(R"(, "mode": "shadow")") == plain);
}

TEST_CASE("key shapes: a lease, or a change of only its size N, keeps the counter's key") {
    // SPEC §2 `sync`: changing only N is not a rule change (the counter is kept).
    auto key_of = [](const char* scope, const char* algo, const char* extra) {
        auto cfg = rategate::config::parse_config(std::string(R"({
          "listen": "127.0.0.1:8080",
          "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
          "limiters": { "g": { "scope": ")") + scope + R"(", )" +
                                                      algo + extra + R"( } },
          "routes": [ { "name": "r", "match": { "path": "/" }, "upstream": "u", "limiters": ["g"] } ]
        })",
                                                  "k.json");
        policy pol(*cfg);
        policy::request_keys keys;
        pol.keys_for(0, identity{}, keys);
        REQUIRE(keys.refs.size() == 1);
        return keys.refs[0].key;
    };
    const char* tb =
        R"("algorithm": "token_bucket", "rules": [{ "rate": 5, "period": "1s", "burst": 10 }])";
    const char* fw = R"("algorithm": "fixed_window", "rules": [{ "limit": 50, "window": "1s" }])";
    for (const char* scope : {"global", "route"}) {
        CAPTURE(scope);
        CHECK(key_of(scope, tb, "") == key_of(scope, tb, R"(, "sync": { "lease": 4 })"));
        CHECK(key_of(scope, tb, R"(, "sync": { "lease": 4 })") ==
              key_of(scope, tb, R"(, "sync": { "lease": 10 })"));
        CHECK(key_of(scope, fw, R"(, "sync": { "lease": 1 })") ==
              key_of(scope, fw, R"(, "sync": { "lease": 50 })"));
    }
    // A rule change still gives new keys.
    CHECK(
        key_of("global", tb, R"(, "sync": { "lease": 4 })") !=
        key_of(
            "global",
            R"("algorithm": "token_bucket", "rules": [{ "rate": 6, "period": "1s", "burst": 10 }])",
            R"(, "sync": { "lease": 4 })"));
}

TEST_CASE("key shapes: gcra's state layout 1 (TAT relative to last) has keys of its own") {
    // A key written by an earlier gateway holds an absolute TAT (~1.7e15 us): read as the new
    // relative one it would refuse for decades, and an older gateway reading a relative TAT as
    // absolute would admit a full burst on every request. The layout is part of the shape.
    std::vector<rule_params> rules{{5, 1e6, 10, 0}};
    CHECK(algorithm_facts(rategate::config::algorithm::gcra).layout == 1);
    CHECK(shape_tag(6, rules, false, 1) != shape_tag(6, rules));
    CHECK(shape_tag(6, rules, true, 1) != shape_tag(6, rules, true));
    // Layout 0 leaves every other algorithm's keys as they were.
    CHECK(shape_tag(5, rules, false, 0) == shape_tag(5, rules));
    for (const auto& row : algorithm_table)
        if (row.algo != rategate::config::algorithm::gcra) CHECK(row.layout == 0);
    auto cfg = rategate::config::parse_config(R"({
      "listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "limiters": { "g": { "scope": "global", "algorithm": "gcra",
                           "rules": [{ "rate": 5, "period": "1s", "burst": 10 }] } },
      "routes": [ { "name": "r", "match": { "path": "/" }, "upstream": "u", "limiters": ["g"] } ]
    })",
                                              "k.json");
    policy pol(*cfg);
    policy::request_keys keys;
    pol.keys_for(0, identity{}, keys);
    REQUIRE(keys.refs.size() == 1);
    CHECK(keys.refs[0].key.find(shape_tag(6, rules, false, 1)) != std::string::npos);
}
