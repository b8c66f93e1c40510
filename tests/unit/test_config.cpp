#include <doctest/doctest.h>

#include <algorithm>
#include <span>

#include "config/config.hpp"
#include "config_errors.hpp"

using namespace rategate::config;

using rategate::config::testing::errors_of;

namespace {

const char* minimal_prefix = R"("listen": "127.0.0.1:8080",
  "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
  "routes": [ { "name": "r", "match": { "path_prefix": "/" }, "upstream": "u" } ])";

std::string with(const std::string& extra) {
    return std::string("{") + minimal_prefix + (extra.empty() ? "" : ",") + extra + "}";
}

// The errors of a config whose one limiter, "l", is `body`.
std::string limiter_errors(const std::string& body) {
    return errors_of(with(R"("limiters": { "l": )" + body + "}"));
}

// A limiter body and the start of the one error it must give.
struct bad_limiter {
    std::string body, error;
};

// Each case, as limiter "l", gives that error and no other.
void check_each_gives_one_error(std::span<const bad_limiter> cases) {
    for (const auto& c : cases) {
        CAPTURE(c.body);
        auto e = limiter_errors(c.body);
        CHECK(e.find("f.json: " + c.error) == 0);
        CHECK(std::count(e.begin(), e.end(), '\n') == 1);  // that error and no other
    }
}

}  // namespace

TEST_CASE("the SPEC's example config loads with every field") {
    auto cfg = parse_config(R"({
      "listen": "0.0.0.0:8080",
      "threads": 0,                       // 0 = one event loop per core
      "admin": { "listen": "127.0.0.1:9901" },
      "limits": { "max_header_bytes": 16384, "max_body_bytes": "10MiB",
                  "header_timeout": "10s", "idle_timeout": "60s", "max_connections": 10000 },
      "redis": { "url": "redis://:s3cret@127.0.0.1:6380/2", "connections_per_thread": 1,
                 "command_timeout": "50ms", "key_prefix": "rategate:", "clock": "redis" },
      "identity": { "user": { "header": "X-User-Id" },
                    "client_ip": { "trusted_proxies": ["127.0.0.1/32", "10.0.0.0/8", "::1"] } },
      "upstreams": { "orders": { "targets": ["127.0.0.1:9001", "localhost:9002"],
                                 "connect_timeout": "1s", "response_timeout": "30s", "max_idle_per_target": 64 } },
      "limiters": {
        "global-protect": { "scope": "global", "algorithm": "token_bucket",
                            "rules": [{ "rate": 10000, "period": "1s", "burst": 20000 }] },
        "orders-api": { "scope": "route", "algorithm": "sliding_window_log",
                        "rules": [{ "limit": 100, "window": "50s" }, { "limit": 10, "window": "20s" }] },
        "per-user": { "scope": "user", "algorithm": "token_bucket", "per_route": true,
                      "rules": [{ "rate": 1, "period": "1s", "burst": 10 }], "on_missing_key": "deny" },
        "per-ip": { "scope": "ip", "algorithm": "fixed_window", "rules": [{ "limit": 5, "window": "2s" }],
                    "ipv6_prefix": 64, "mode": "shadow", "delay": "500ms" },
        "by-key": { "scope": "header:X-Api-Key", "algorithm": "smooth_warming_up",
                    "rules": [{ "rate": 5, "warmup_period": "3s" }] }
      },
      "routes": [
        { "name": "orders", "match": { "path_prefix": "/api/orders", "methods": ["GET", "POST"] },
          "upstream": "orders", "strip_prefix": "/api",
          "limiters": ["global-protect", "orders-api", "per-user", "per-ip"], "cost": 1,
          "on_limit": { "status": 429, "message": "Too many requests, please retry later" },
          "on_redis_error": "allow", "headers": "both" } ]
    })",
                            "spec.json");
    CHECK(cfg->listen.port == 8080);
    CHECK(cfg->admin_listen->to_string() == "127.0.0.1:9901");
    CHECK(cfg->limits.max_body_bytes == 10ull * 1024 * 1024);
    CHECK(cfg->limits.header_timeout == millis(10'000));
    REQUIRE(cfg->redis);
    CHECK(cfg->redis->password == "s3cret");
    CHECK(cfg->redis->port == 6380);
    CHECK(cfg->redis->db == 2);
    CHECK(cfg->identity.trusted_proxies.size() == 3);
    CHECK(cfg->identity.trusted_proxies[1].prefix == 8);
    CHECK(cfg->upstreams.at("orders").targets[1].host == "localhost");
    CHECK(cfg->limiters.at("orders-api").rules[1].window == micros(20'000'000));
    CHECK(cfg->limiters.at("per-user").per_route);
    CHECK(cfg->limiters.at("per-user").on_missing_key == missing_key_policy::deny);
    CHECK(cfg->limiters.at("per-ip").shadow);
    CHECK(cfg->limiters.at("per-ip").delay == micros(500'000));
    CHECK(cfg->limiters.at("per-ip").ipv6_prefix == 64);
    CHECK(cfg->limiters.at("by-key").scope == scope_kind::header);
    CHECK(cfg->limiters.at("by-key").scope_header == "X-Api-Key");
    CHECK(cfg->limiters.at("by-key").rules[0].cold_factor == 3.0);
    CHECK(cfg->routes[0].headers == header_style::both);
    CHECK(cfg->routes[0].limiters.size() == 4);
}

TEST_CASE("a minimal config gets the documented defaults") {
    auto cfg = parse_config(with(""), "m.json");
    CHECK(cfg->threads == 0);
    CHECK_FALSE(cfg->redis);
    CHECK(cfg->limits.max_header_bytes == 16384);
    CHECK(cfg->limits.idle_timeout == millis(60'000));
    CHECK(cfg->upstreams.at("u").connect_timeout == millis(1000));
    CHECK(cfg->routes[0].on_limit_status == 429);
    CHECK(cfg->routes[0].cost == 1);
}

TEST_CASE("integer durations are milliseconds") {
    auto cfg = parse_config(with(R"("limits": { "header_timeout": 2500 })"), "m.json");
    CHECK(cfg->limits.header_timeout == millis(2500));
}

TEST_CASE("every error is reported, each with its JSON path") {
    auto e = errors_of(R"({
      "listen": "127.0.0.1:99999",
      "thread": 2,
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"], "connect_timeout": "fast" } },
      "routes": [ { "name": "r", "match": { "path_prefix": "/" }, "upstream": "missing" } ]
    })");
    CHECK(e.find("f.json: listen: port must be 1..65535") != std::string::npos);
    CHECK(e.find("f.json: thread: unknown key \"thread\" (did you mean \"threads\"?)") !=
          std::string::npos);
    CHECK(e.find("f.json: upstreams.u.connect_timeout: ") != std::string::npos);
    CHECK(e.find("f.json: routes[0].upstream: no upstream named \"missing\"") != std::string::npos);
    CHECK(std::count(e.begin(), e.end(), '\n') == 4);
}

TEST_CASE("wrong types name the expected type") {
    CHECK(errors_of(with(R"("threads": "two")")) ==
          "f.json: threads: expected an integer, got a string\n");
    CHECK(errors_of(with(R"("limits": { "max_connections": true })")) ==
          "f.json: limits.max_connections: expected an integer, got a boolean\n");
    CHECK(errors_of(with(R"("admin": [])")) == "f.json: admin: expected an object, got an array\n");
}

TEST_CASE("bad values are refused") {
    CHECK(errors_of(with(R"("threads": -1)")) ==
          "f.json: threads: must be between 0 and 1024, got -1\n");
    CHECK(errors_of(with(R"("limits": { "max_body_bytes": "10 potatoes" })"))
              .find("limits.max_body_bytes") != std::string::npos);
    CHECK(errors_of(with(R"("limits": { "idle_timeout": "0s" })")) ==
          "f.json: limits.idle_timeout: duration must be greater than zero\n");
    CHECK(
        errors_of(with(R"("redis": { "url": "http://x" })")).find("redis.url: expected redis://") !=
        std::string::npos);
    CHECK(errors_of(with(R"("redis": { "url": "redis://h:1/0", "clock": "wall" })")) ==
          "f.json: redis.clock: unknown value \"wall\" (expected one of \"redis\", \"gateway\")\n");
    CHECK(
        errors_of(with(R"("identity": { "client_ip": { "trusted_proxies": ["10.0.0.0/33"] } })")) ==
        "f.json: identity.client_ip.trusted_proxies[0]: \"10.0.0.0/33\" is not a CIDR block such "
        "as 10.0.0.0/8\n");
    CHECK(errors_of(with(R"("identity": { "client_ip": { "trusted_hops": 0 } })")) ==
          "f.json: identity.client_ip.trusted_hops: must be between 1 and 64, got 0\n");
    CHECK(errors_of(with(R"("identity": { "client_ip": { "trusted_hops": "2" } })")) != "");
    CHECK(errors_of(with(R"("identity": { "client_ip": { "trusted_hops": 2 } })")) == "");
    CHECK(errors_of(with(R"("listen2": 1)")).find("unknown key \"listen2\"") != std::string::npos);
}

TEST_CASE("limiter fields are validated per algorithm") {
    const auto& lim = limiter_errors;
    CHECK(
        lim(R"({ "scope": "global", "algorithm": "token_bucket", "rules": [{ "rate": 0, "period": "1s", "burst": 1 }] })") ==
        "f.json: limiters.l.rules[0].rate: must be > 0, got 0\n");
    CHECK(lim(R"({ "scope": "global", "algorithm": "fixed_window", "rules": [{ "limit": 5 }] })") ==
          "f.json: limiters.l.rules[0].window: is required\n");
    CHECK(
        lim(R"({ "scope": "global", "algorithm": "fixed_window", "rules": [{ "limit": 5, "window": "1s", "burst": 3 }] })") ==
        "f.json: limiters.l.rules[0].burst: unknown key \"burst\"\n");
    CHECK(lim(R"({ "scope": "planet", "algorithm": "gcra", "rules": [{ "rate": 1 }] })")
              .find("limiters.l.scope: unknown scope") != std::string::npos);
    CHECK(lim(R"({ "scope": "global", "algorithm": "magic", "rules": [] })")
              .find("limiters.l.algorithm: unknown value \"magic\"") != std::string::npos);
    CHECK(lim(R"({ "scope": "global", "algorithm": "gcra", "rules": [] })") ==
          "f.json: limiters.l.rules: expected a non-empty array of rules\n");
    CHECK(
        lim(R"({ "scope": "user", "algorithm": "gcra", "rules": [{ "rate": 1, "period": "1s", "burst": 1 }], "ipv6_prefix": 64 })") ==
        "f.json: limiters.l.ipv6_prefix: only applies to scope \"ip\"\n");
    CHECK(
        lim(R"({ "scope": "user", "algorithm": "gcra", "rules": [{ "rate": 1, "period": "1s", "burst": 1 }], "ipv4_prefix": 24 })") ==
        "f.json: limiters.l.ipv4_prefix: only applies to scope \"ip\"\n");
    CHECK(
        lim(R"({ "scope": "ip", "algorithm": "fixed_window", "rules": [{ "limit": 1, "window": "1s" }], "ipv4_prefix": 33 })") ==
        "f.json: limiters.l.ipv4_prefix: must be between 0 and 32, got 33\n");
    CHECK(
        lim(R"({ "scope": "global", "algorithm": "gcra", "rules": [{ "rate": 1 }], "mode": "dry" })")
            .find("limiters.l.mode") != std::string::npos);
    CHECK(
        lim(R"({ "scope": "global", "algorithm": "sliding_window_counter", "rules": [{ "limit": 1, "window": "1s", "buckets": 7 }] })")
            .find("limiters.l.rules[0].buckets: window must divide") != std::string::npos);
}

TEST_CASE(
    "a lease is refused at limiters.NAME.sync outside token_bucket and fixed_window of "
    "scope global or route, and above the smallest burst or limit") {
    const auto& lim = limiter_errors;
    const std::string tb =
        R"("algorithm": "token_bucket", "rules": [{ "rate": 5, "period": "1s", "burst": 20 }, { "rate": 50, "period": "1m", "burst": 8.5 }])";
    const std::string fw =
        R"("algorithm": "fixed_window", "rules": [{ "limit": 30, "window": "1s" }])";
    // Accepted: token bucket and fixed window, global and route, 1 ≤ N ≤ smallest burst/limit.
    CHECK(lim(R"({ "scope": "global", )" + tb + R"(, "sync": { "lease": 8 } })") == "");
    CHECK(lim(R"({ "scope": "route", )" + fw + R"(, "sync": { "lease": 30 } })") == "");
    CHECK(lim(R"({ "scope": "global", )" + fw + R"(, "sync": { "lease": 1 } })") == "");
    const bad_limiter cases[] = {
        {R"({ "scope": "global", )" + tb + R"(, "sync": { "lease": 9 } })",
         "limiters.l.sync: must be between 1 and 8, got 9"},
        {R"({ "scope": "route", )" + fw + R"(, "sync": { "lease": 31 } })",
         "limiters.l.sync: must be between 1 and 30, got 31"},
        {R"({ "scope": "global", )" + fw + R"(, "sync": { "lease": 0 } })",
         "limiters.l.sync: must be between 1 and 30, got 0"},
        {R"({ "scope": "global", )" + fw + R"(, "sync": { "lease": 2.5 } })", "limiters.l.sync: "},
        {R"({ "scope": "global", )" + fw + R"(, "sync": { "lease": "10" } })", "limiters.l.sync: "},
        {R"({ "scope": "user", )" + fw + R"(, "sync": { "lease": 5 } })",
         "limiters.l.sync: a lease applies to scopes \"global\" and \"route\" only"},
        {R"({ "scope": "ip", )" + tb + R"(, "sync": { "lease": 5 } })",
         "limiters.l.sync: a lease applies to scopes \"global\" and \"route\" only"},
        {R"({ "scope": "header:X-Key", )" + tb + R"(, "sync": { "lease": 5 } })",
         "limiters.l.sync: a lease applies to scopes \"global\" and \"route\" only"},
        {R"({ "scope": "global", "algorithm": "gcra", "rules": [{ "rate": 5, "period": "1s", "burst": 20 }], "sync": { "lease": 5 } })",
         "limiters.l.sync: a lease applies to token_bucket and fixed_window only"},
        {R"({ "scope": "global", "algorithm": "sliding_window_log", "rules": [{ "limit": 5, "window": "1s" }], "sync": { "lease": 5 } })",
         "limiters.l.sync: a lease applies to token_bucket and fixed_window only"},
        {R"({ "scope": "global", )" + tb + R"(, "mode": "shadow", "sync": { "lease": 5 } })",
         "limiters.l.sync: a leased layer cannot be in shadow mode"},
        {R"({ "scope": "global", )" + tb + R"(, "delay": "1s", "sync": { "lease": 5 } })",
         "limiters.l.sync: a leased layer cannot have a delay"},
        {R"({ "scope": "global", )" + tb + R"(, "sync": { } })",
         "limiters.l.sync.lease: is required"},
        {R"({ "scope": "global", )" + tb + R"(, "sync": { "lease": 5, "ttl": 3 } })",
         "limiters.l.sync.ttl: unknown key"},
        {R"({ "scope": "global", )" + tb + R"(, "sync": 5 })",
         "limiters.l.sync: expected an object"},
    };
    check_each_gives_one_error(cases);
}

TEST_CASE("every rule field without a default is required, for every algorithm") {
    // SPEC §2 "Required fields": all missing fields of all rules in one run, each with its path.
    auto e = errors_of(with(R"("limiters": {
        "tb": { "scope": "global", "algorithm": "token_bucket", "rules": [{ "rate": 1, "period": "1s" }, {}] },
        "gc": { "scope": "global", "algorithm": "gcra", "rules": [{ "rate": 1, "burst": 2 }] },
        "lb": { "scope": "global", "algorithm": "leaky_bucket", "rules": [{ "rate": 1, "period": "1s" }] },
        "fw": { "scope": "global", "algorithm": "fixed_window", "rules": [{ "window": "1s" }] },
        "sl": { "scope": "global", "algorithm": "sliding_window_log", "rules": [{ "limit": 1 }] },
        "sc": { "scope": "global", "algorithm": "sliding_window_counter", "rules": [{}] },
        "sb": { "scope": "global", "algorithm": "smooth_bursty", "rules": [{}] },
        "sw": { "scope": "global", "algorithm": "smooth_warming_up", "rules": [{ "rate": 1 }] } })"));
    CHECK(e ==
          "f.json: limiters.fw.rules[0].limit: is required\n"
          "f.json: limiters.gc.rules[0].period: is required\n"
          "f.json: limiters.lb.rules[0].capacity: is required\n"
          "f.json: limiters.sb.rules[0].rate: is required\n"
          "f.json: limiters.sc.rules[0].limit: is required\n"
          "f.json: limiters.sc.rules[0].window: is required\n"
          "f.json: limiters.sl.rules[0].window: is required\n"
          "f.json: limiters.sw.rules[0].warmup_period: is required\n"
          "f.json: limiters.tb.rules[0].burst: is required\n"
          "f.json: limiters.tb.rules[1].rate: is required\n"
          "f.json: limiters.tb.rules[1].period: is required\n"
          "f.json: limiters.tb.rules[1].burst: is required\n");
    // The fields with a default may be left out.
    CHECK(errors_of(with(R"("limiters": {
        "sc": { "scope": "global", "algorithm": "sliding_window_counter", "rules": [{ "limit": 1, "window": "1s" }] },
        "sb": { "scope": "global", "algorithm": "smooth_bursty", "rules": [{ "rate": 1 }] },
        "sw": { "scope": "global", "algorithm": "smooth_warming_up", "rules": [{ "rate": 1, "warmup_period": "1s" }] } })")) ==
          "");
}

TEST_CASE("a route cost no request could ever pass is an error naming the limiter") {
    auto e = errors_of(R"({
      "listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "limiters": {
        "tb": { "scope": "global", "algorithm": "token_bucket", "rules": [{ "rate": 100, "period": "1s", "burst": 5 }] },
        "gc": { "scope": "global", "algorithm": "gcra", "rules": [{ "rate": 100, "period": "1s", "burst": 5 }] },
        "lb": { "scope": "global", "algorithm": "leaky_bucket", "rules": [{ "rate": 1, "period": "1s", "capacity": 5.5 }] },
        "fw": { "scope": "global", "algorithm": "fixed_window", "rules": [{ "limit": 100, "window": "1s" }, { "limit": 5, "window": "1m" }] },
        "sl": { "scope": "global", "algorithm": "sliding_window_log", "rules": [{ "limit": 5, "window": "1s" }] },
        "sc": { "scope": "global", "algorithm": "sliding_window_counter", "rules": [{ "limit": 5, "window": "1s" }] },
        "sb": { "scope": "global", "algorithm": "smooth_bursty", "rules": [{ "rate": 1 }] },
        "sw": { "scope": "global", "algorithm": "smooth_warming_up", "rules": [{ "rate": 1, "warmup_period": "1s" }] },
        "delayed": { "scope": "global", "algorithm": "token_bucket", "delay": "10s",
                     "rules": [{ "rate": 1, "period": "1s", "burst": 5 }] },
        "shadow": { "scope": "global", "algorithm": "token_bucket", "mode": "shadow",
                    "rules": [{ "rate": 1, "period": "1s", "burst": 5 }] }
      },
      "routes": [
        { "name": "fits", "match": { "path": "/a" }, "upstream": "u", "cost": 5,
          "limiters": ["tb", "gc", "lb", "fw", "sl", "sc", "sb", "sw", "delayed", "shadow"] },
        { "name": "too-big", "match": { "path": "/b" }, "upstream": "u", "cost": 6,
          "limiters": ["tb", "gc", "lb", "fw", "sl", "sc", "sb", "sw", "delayed", "shadow"] },
        { "name": "smooth", "match": { "path": "/c" }, "upstream": "u", "cost": 1000,
          "limiters": ["sb", "sw", "shadow"] } ]
    })");
    CHECK(e ==
          "f.json: routes[1].cost: cost 6 exceeds limiter \"tb\" (rules[0].burst = 5): no request "
          "could ever pass\n"
          "f.json: routes[1].cost: cost 6 exceeds limiter \"gc\" (rules[0].burst = 5): no request "
          "could ever pass\n"
          "f.json: routes[1].cost: cost 6 exceeds limiter \"lb\" (rules[0].capacity = 5.5): no "
          "request could ever pass\n"
          "f.json: routes[1].cost: cost 6 exceeds limiter \"fw\" (rules[1].limit = 5): no request "
          "could ever pass\n"
          "f.json: routes[1].cost: cost 6 exceeds limiter \"sl\" (rules[0].limit = 5): no request "
          "could ever pass\n"
          "f.json: routes[1].cost: cost 6 exceeds limiter \"sc\" (rules[0].limit = 5): no request "
          "could ever pass\n"
          "f.json: routes[1].cost: cost 6 exceeds limiter \"delayed\" (rules[0].burst = 5): no "
          "request could ever pass\n");
    // The default cost of 1 is checked too.
    CHECK(errors_of(R"({
      "listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "limiters": { "lb": { "scope": "global", "algorithm": "leaky_bucket",
                            "rules": [{ "rate": 1, "period": "1s", "capacity": 0.5 }] } },
      "routes": [ { "name": "r", "match": { "path": "/" }, "upstream": "u", "limiters": ["lb"] } ]
    })") ==
          "f.json: routes[0].cost: cost 1 exceeds limiter \"lb\" (rules[0].capacity = 0.5): no "
          "request could ever pass\n");
}

TEST_CASE(
    "a rule, or a route cost, whose refill, debt or retry would span more than 1e15 us is an "
    "error at its path") {
    // Before: accepted; the chain script then failed on every admission (SET PX of 4.7e19 ms,
    // "value is not an integer or out of range") while the in-process twin admitted, and a
    // retry past 9.2e18 us came back from Redis as 0.
    const auto& lim = limiter_errors;
    const bad_limiter cases[] = {
        {R"({ "scope": "user", "algorithm": "token_bucket", "rules": [{ "rate": 1, "period": "8760h", "burst": 1e9 }] })",
         "limiters.l.rules[0].rate: (burst + cost) x period / rate is 3.15e+22 us at cost 1; at "
         "most 1e15 us (about 31 years)"},
        {R"({ "scope": "user", "algorithm": "leaky_bucket", "rules": [{ "rate": 1e-15, "period": "1s", "capacity": 1 }] })",
         "limiters.l.rules[0].rate: (capacity + cost) x period / rate is 2e+21 us"},
        {R"({ "scope": "user", "algorithm": "gcra", "rules": [{ "rate": 1, "period": "1s", "burst": 2 }, { "rate": 1e-15, "period": "1s", "burst": 1 }] })",
         "limiters.l.rules[1].rate: (burst + cost) x period / rate is 2e+21 us"},
        {R"({ "scope": "user", "algorithm": "smooth_bursty", "rules": [{ "rate": 1e-15 }] })",
         "limiters.l.rules[0].rate: (max_burst_seconds + cost / rate) (s) is 1e+21 us"},
        {R"({ "scope": "user", "algorithm": "smooth_bursty", "rules": [{ "rate": 1, "max_burst_seconds": 1e12 }] })",
         "limiters.l.rules[0].rate: (max_burst_seconds + cost / rate) (s) is 1e+18 us"},
        {R"({ "scope": "user", "algorithm": "smooth_warming_up", "rules": [{ "rate": 1, "warmup_period": "1s", "cold_factor": 1e300 }] })",
         "limiters.l.rules[0].rate: warmup_period + cost x cold_factor / rate (s) is 1e+306 us"},
    };
    check_each_gives_one_error(cases);
    // Up to the bound: 31 permits of one a year each (9.8e14 us), one a day (idle_ttl 1y).
    CHECK(
        lim(R"({ "scope": "user", "algorithm": "token_bucket", "rules": [{ "rate": 1, "period": "8760h", "burst": 30 }] })") ==
        "");
    CHECK(
        lim(R"({ "scope": "user", "algorithm": "smooth_bursty", "rules": [{ "rate": 1.1574e-5, "idle_ttl": "8760h" }] })") ==
        "");
    // A route's cost is checked against every layer's rules, shadow ones included.
    auto route = [](const std::string& limiter, int cost) {
        return errors_of(R"({
          "listen": "127.0.0.1:8080",
          "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
          "limiters": { "sb": )" +
                         limiter + R"( },
          "routes": [ { "name": "r", "match": { "path": "/" }, "upstream": "u", "cost": )" +
                         std::to_string(cost) + R"(, "limiters": ["sb"] } ]
        })");
    };
    const std::string sb =
        R"({ "scope": "user", "algorithm": "smooth_bursty", "rules": [{ "rate": 0.001 }])";
    CHECK(route(sb + "}", 1000) == "");
    CHECK(route(sb + "}", 10'000'000) ==
          "f.json: routes[0].cost: limiter \"sb\" rules[0]: (max_burst_seconds + cost / rate) (s) "
          "is 1e+16 us at cost 10000000; at most 1e15 us (about 31 years)\n");
    CHECK(route(sb + R"(, "mode": "shadow" })", 10'000'000).find("routes[0].cost: limiter") !=
          std::string::npos);
}

TEST_CASE("a rule that may hold more than 1e12 permits is an error at its field") {
    // Before: accepted. A token bucket of burst 1e17 never empties (1e17 - 1 == 1e17 in a
    // double), and past 9.2e18 Redis reported remaining 0 where the in-process twin said 1e19.
    const auto& lim = limiter_errors;
    const bad_limiter cases[] = {
        {R"({ "scope": "user", "algorithm": "token_bucket", "rules": [{ "rate": 1e12, "period": "1s", "burst": 1e17 }] })",
         "limiters.l.rules[0].burst: the rule holds up to 1e+17 permits; at most 1e12 (a window's "
         "largest limit)"},
        {R"({ "scope": "user", "algorithm": "gcra", "rules": [{ "rate": 1e12, "period": "1s", "burst": 1e19 }] })",
         "limiters.l.rules[0].burst: the rule holds up to 1e+19 permits"},
        {R"({ "scope": "user", "algorithm": "leaky_bucket", "rules": [{ "rate": 1e12, "period": "1s", "capacity": 2e12 }] })",
         "limiters.l.rules[0].capacity: the rule holds up to 2e+12 permits"},
        {R"({ "scope": "user", "algorithm": "smooth_bursty", "rules": [{ "rate": 1e300 }] })",
         "limiters.l.rules[0].max_burst_seconds: the rule holds up to 1e+300 permits"},
        {R"({ "scope": "user", "algorithm": "smooth_warming_up", "rules": [{ "rate": 1e9, "warmup_period": "1h" }] })",
         "limiters.l.rules[0].warmup_period: the rule holds up to 3.6e+12 permits"},
    };
    check_each_gives_one_error(cases);
    CHECK(
        lim(R"({ "scope": "user", "algorithm": "token_bucket", "rules": [{ "rate": 1e9, "period": "1ms", "burst": 1e12 }] })") ==
        "");
    CHECK(
        lim(R"({ "scope": "user", "algorithm": "smooth_warming_up", "rules": [{ "rate": 1e6, "warmup_period": "1h" }] })") ==
        "");
}

TEST_CASE("a route lists at most 32 limiters (the shadow mask's bits)") {
    // Before: 33 were accepted. With a shadow layer at index 32 that rejects, the in-process
    // twin set bit 0 (1u << 32: an enforced layer named as shadow-limited) and the script's
    // mask 2^32 failed the reply's decoding: every such request went to on_redis_error.
    auto routed = [](int n) {
        std::string limiters, names;
        for (int i = 0; i < n; ++i) {
            limiters +=
                (i ? ", " : "") + std::string("\"l") + std::to_string(i) +
                R"(": { "scope": "ip", "algorithm": "fixed_window", "rules": [{ "limit": 5, "window": "1s" }] })";
            names += (i ? ", " : "") + std::string("\"l") + std::to_string(i) + "\"";
        }
        return errors_of(R"({ "listen": "127.0.0.1:8080",
          "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
          "limiters": { )" +
                         limiters + R"( },
          "routes": [ { "name": "r", "match": { "path": "/" }, "upstream": "u", "limiters": [)" +
                         names + "] } ] }");
    };
    CHECK(routed(32) == "");
    CHECK(routed(33) == "f.json: routes[0].limiters: at most 32 limiters per route, got 33\n");
}

TEST_CASE("identity.client_ip.header picks the forwarding header") {
    auto cfg = parse_config(with(""), "f.json");
    CHECK(cfg->identity.client_ip_header == "X-Forwarded-For");
    cfg = parse_config(with(R"("identity": { "client_ip": { "header": "Forwarded",
                                                            "trusted_proxies": ["10.0.0.0/8"] } })"),
                       "f.json");
    CHECK(cfg->identity.client_ip_header == "Forwarded");
    cfg = parse_config(with(R"("identity": { "client_ip": { "header": "x-real-ip" } })"), "f.json");
    CHECK(cfg->identity.client_ip_header == "x-real-ip");
    CHECK(errors_of(with(R"("identity": { "client_ip": { "header": "X Real IP" } })")) ==
          "f.json: identity.client_ip.header: \"X Real IP\" is not a valid header name\n");
    CHECK(errors_of(with(R"("identity": { "client_ip": { "header": "" } })")) ==
          "f.json: identity.client_ip.header: must not be empty\n");
    CHECK(errors_of(with(R"("identity": { "client_ip": { "header": 1 } })")) ==
          "f.json: identity.client_ip.header: expected a string, got an integer\n");
}

TEST_CASE("route references and matches are checked") {
    auto e = errors_of(R"({
      "listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "routes": [
        { "name": "a", "match": { "path_prefix": "api" }, "upstream": "u", "limiters": ["nope"] },
        { "name": "a", "match": { "methods": ["GET"] }, "upstream": "u", "on_limit": { "status": 200 } } ]
    })");
    CHECK(e.find("f.json: routes[0].match.path_prefix: must start with \"/\"") !=
          std::string::npos);
    CHECK(e.find("f.json: routes[0].limiters[0]: no limiter named \"nope\"") != std::string::npos);
    CHECK(e.find("f.json: routes[1].match: needs \"path\" or \"path_prefix\"") !=
          std::string::npos);
    CHECK(e.find("f.json: routes[1].on_limit.status: must be between 400 and 599, got 200") !=
          std::string::npos);
    CHECK(e.find("f.json: routes[1].name: duplicate route name \"a\"") != std::string::npos);
}

TEST_CASE("invalid JSON names the line") {
    auto e = errors_of("{\n  \"listen\": \"127.0.0.1:8080\",\n  oops\n}");
    CHECK(e.find("f.json: $: invalid JSON at line 3") != std::string::npos);
}

TEST_CASE("a number too large for a double is a config error, not a stray json exception") {
    // Found by tests/fuzz/fuzz_config: nlohmann::json throws out_of_range, not parse_error.
    CHECK(errors_of(R"({"listen": "127.0.0.1:8080", "threads": 8E8888888})") ==
          "f.json: $: invalid JSON: number overflow parsing '8E8888888'\n");
}

TEST_CASE("missing required sections are reported together") {
    auto e = errors_of("{}");
    CHECK(e ==
          "f.json: listen: is required\nf.json: upstreams: is required\nf.json: routes: is "
          "required\n");
}

TEST_CASE("redis.cluster: seed nodes, credentials beside, the over-limit cache off") {
    auto loaded =
        parse_config(with(R"("redis": { "cluster": { "nodes": ["127.0.0.1:7000", "[::1]:7001"] },
                           "password": "pw", "command_timeout": "200ms" })"),
                     "f.json");
    const auto& cfg = *loaded;
    REQUIRE(cfg.redis);
    REQUIRE(cfg.redis->cluster);
    REQUIRE(cfg.redis->cluster->nodes.size() == 2);
    CHECK(cfg.redis->cluster->nodes[0].port == 7000);
    CHECK(cfg.redis->cluster->nodes[1].host == "::1");
    CHECK(cfg.redis->password == "pw");
    CHECK(cfg.redis->over_limit_cache == 0);
    CHECK(cfg.redis->url.empty());

    CHECK(errors_of(with(R"("redis": { "cluster": { "nodes": ["127.0.0.1:7000"] },
                                       "over_limit_cache": 100 })"))
              .find("redis.over_limit_cache: must be 0 with \"cluster\"") != std::string::npos);
    CHECK(errors_of(with(R"("redis": { "cluster": { "nodes": [] } })"))
              .find("redis.cluster.nodes: expected a non-empty array") != std::string::npos);
    CHECK(errors_of(with(R"("redis": { "cluster": { "nodes": ["x:1"], "seeds": 1 } })"))
              .find("redis.cluster.seeds: unknown key") != std::string::npos);
    CHECK(errors_of(with(R"("redis": { "cluster": { "nodes": ["x:1"] }, "url": "redis://h:1" })"))
              .find("needs exactly one of") != std::string::npos);
    CHECK(errors_of(with(R"("redis": { "cluster": { "nodes": ["x:1"] }, "db": 2 })"))
              .find("redis.db") != std::string::npos);
    CHECK(errors_of(with(R"("redis": { "cluster": { "nodes": ["x:1"] }, "key_prefix": "a{b}:" })"))
              .find("redis.key_prefix: must not hold '{' or '}'") != std::string::npos);
    CHECK(errors_of(with(R"("redis": { "url": "redis://h:1", "key_prefix": "a{b}:" })")) == "");
    CHECK(errors_of(
              with(R"("redis": { "cluster": { "nodes": ["x:1"] }, "connections_per_thread": 2 })"))
              .find("redis.connections_per_thread: must be 1 with \"cluster\"") !=
          std::string::npos);
}

TEST_CASE("http2 section: defaults, sizes, and h2c without HTTP/2 refused") {
    auto d = parse_config(with(R"("threads": 1)"), "h2.json");
    CHECK(d->http2.enabled);
    CHECK_FALSE(d->http2.h2c);
    CHECK(d->http2.max_concurrent_streams == 100);
    CHECK(d->http2.initial_window_size == 1024 * 1024);
    CHECK(d->http2.max_resets_per_second == 100);
    auto s = parse_config(with(R"("http2": { "h2c": true, "max_concurrent_streams": 5,
                "initial_window_size": "64KiB", "max_resets_per_second": 7 })"),
                          "h2.json");
    CHECK(s->http2.h2c);
    CHECK(s->http2.max_concurrent_streams == 5);
    CHECK(s->http2.initial_window_size == 65536);
    CHECK(s->http2.max_resets_per_second == 7);
    CHECK(parse_config(with(R"("http2": { "initial_window_size": 1000 })"), "h2.json")
              ->http2.initial_window_size == 1000);
    CHECK(errors_of(with(R"("http2": { "enabled": false, "h2c": true })")) ==
          "f.json: http2.h2c: h2c needs HTTP/2 enabled (http2.enabled is false)\n");
    CHECK(errors_of(with(R"("http2": { "initial_window_size": "4GiB" })")) ==
          "f.json: http2.initial_window_size: exceeds 2^31-1 bytes (RFC 9113 §6.9.1)\n");
    CHECK(errors_of(with(R"("http2": { "max_concurrent_streams": 0 })"))
              .find("f.json: http2.max_concurrent_streams: must be between 1 and") == 0);
    CHECK(errors_of(with(R"("http2": { "h2": true })")) ==
          "f.json: http2.h2: unknown key \"h2\" (did you mean \"h2c\"?)\n");
}

TEST_CASE("upstream protocol: http/1.1 by default, h2 and h2c") {
    auto cfg = parse_config(R"({ "listen": "127.0.0.1:8080",
      "upstreams": { "a": { "targets": ["127.0.0.1:1"] },
                     "b": { "targets": ["127.0.0.1:2"], "protocol": "http/1.1" },
                     "c": { "targets": ["127.0.0.1:3"], "protocol": "h2" },
                     "d": { "targets": ["127.0.0.1:4"], "protocol": "h2c" } },
      "routes": [ { "name": "r", "match": { "path_prefix": "/" }, "upstream": "a" } ] })",
                            "p.json");
    CHECK(cfg->upstreams.at("a").protocol == upstream_protocol::http1);
    CHECK(cfg->upstreams.at("b").protocol == upstream_protocol::http1);
    CHECK(cfg->upstreams.at("c").protocol == upstream_protocol::h2);
    CHECK(cfg->upstreams.at("d").protocol == upstream_protocol::h2c);
    CHECK(errors_of(R"({ "listen": "127.0.0.1:8080",
      "upstreams": { "a": { "targets": ["127.0.0.1:1"], "protocol": "h3" } },
      "routes": [ { "name": "r", "match": { "path_prefix": "/" }, "upstream": "a" } ] })") ==
          "f.json: upstreams.a.protocol: unknown value \"h3\" (expected one of \"http/1.1\", "
          "\"h2\", \"h2c\")\n");
}
