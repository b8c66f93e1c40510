// Configs the gateway cannot honour are errors naming the JSON path (the review of the loader's
// edges): repeated keys, header limits beyond 32 bits, route hosts the router can never match,
// and rules whose waits or quotas overflow.
#include <doctest/doctest.h>

#include <string>

#include "config/config.hpp"
#include "config_errors.hpp"

using namespace rategate::config;

using rategate::config::testing::errors_of;

namespace {

std::string with_route(const std::string& route_extra, const std::string& extra = "") {
    return std::string(R"({"listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "routes": [ { "name": "r", "match": { "path_prefix": "/")") +
           route_extra + R"( }, "upstream": "u" } ])" + (extra.empty() ? "" : ",") + extra + "}";
}

// A config whose one limiter "l" has `algorithm` and the one rule `rule`.
std::string with_rule(const std::string& algorithm, const std::string& rule) {
    return with_route("", R"("limiters": { "l": { "scope": "global", "algorithm": ")" + algorithm +
                              R"(", "rules": [ )" + rule + " ] } }");
}

}  // namespace

TEST_CASE("a key given twice in one object is an error at its path, wherever it stands") {
    // nlohmann::json kept the last silently: the second "l" replaced the first limiter.
    CHECK(errors_of(R"({"listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "limiters": {
        "l": { "scope": "ip", "algorithm": "fixed_window", "rules": [{ "limit": 5, "window": "1s" }] },
        "l": { "scope": "ip", "algorithm": "fixed_window", "rules": [{ "limit": 500, "window": "1s" }] } },
      "routes": [ { "name": "r", "match": { "path_prefix": "/" }, "upstream": "u",
                    "limiters": ["l"], "cost": 1, "cost": 2 } ],
      "listen": "127.0.0.1:8081"
    })") ==
          "f.json: limiters.l: duplicate key \"l\" (only the last one would count)\n"
          "f.json: routes[0].cost: duplicate key \"cost\" (only the last one would count)\n"
          "f.json: listen: duplicate key \"listen\" (only the last one would count)\n");
    // Inside arrays of objects, the element's index is in the path; equal keys in different
    // objects are fine.
    CHECK(errors_of(with_route("", R"("limiters": { "l": { "scope": "ip",
        "algorithm": "fixed_window", "rules": [ { "limit": 1, "window": "1s" },
        { "limit": 2, "window": "1s", "window": "2s" } ] } })")) ==
          "f.json: limiters.l.rules[1].window: duplicate key \"window\" (only the last one would "
          "count)\n");
    CHECK(errors_of(with_route(R"(, "methods": ["GET", "POST"])")) == "");
}

TEST_CASE("max_header_bytes is at most 8MiB (the parsers' limits are 32-bit)") {
    // "4GiB" was a header limit of 4 bytes once cast to 32 bits: every request a 400.
    CHECK(errors_of(with_route("", R"("limits": { "max_header_bytes": "4GiB" })")) ==
          "f.json: limits.max_header_bytes: must be at most 8MiB (8388608 bytes)\n");
    CHECK(errors_of(with_route("", R"("limits": { "max_header_bytes": 8388609 })")) ==
          "f.json: limits.max_header_bytes: must be at most 8MiB (8388608 bytes)\n");
    CHECK(errors_of(with_route("", R"("limits": { "max_header_bytes": "8MiB" })")) == "");
}

TEST_CASE("a route's host is a name or an address with an optional port") {
    struct row {
        const char* host;
        bool ok;
    };
    const row rows[] = {
        {"api.example.com", true},
        {"API.Example.com:8443", true},
        {"10.0.0.1", true},
        {"[::1]", true},
        {"[2001:db8::1]:8080", true},
        {"example.com.", true},
        {"*.example.com", false},
        {"http://example.com", false},
        {"example.com/", false},
        {"example.com:99999", false},
        {"example.com:", false},
        {"example.com:x", false},
        {"::1", false},
        {"[example.com]", false},
        {"[::1]x", false},
        {"a b", false},
    };
    for (const auto& r : rows) {
        CAPTURE(r.host);
        auto e = errors_of(with_route(std::string(R"(, "host": ")") + r.host + "\""));
        if (r.ok)
            CHECK(e == "");
        else
            CHECK(e == std::string("f.json: routes[0].match.host: expected a host name or "
                                   "address, optionally with :port (no wildcards, scheme or "
                                   "path), got \"") +
                           r.host + "\"\n");
    }
}

TEST_CASE("rules whose quotas or waits overflow are errors at the field") {
    struct row {
        const char* algorithm;
        const char* rule;
        const char* error;  // "" when valid
    };
    // Each is refused at the field named (the message says by how much: limiters::span_problem
    // and the permits cap); the edges pass.
    const row rows[] = {
        // A rate of 1e-300 sent "X-RateLimit-Reset: -9223372036854775808" and "Retry-After: 1".
        {"token_bucket", R"({ "rate": 1e-300, "period": "1s", "burst": 1 })", "rules[0].rate"},
        {"gcra", R"({ "rate": 1, "period": "277777h", "burst": 2 })", "rules[0].rate"},
        {"leaky_bucket", R"({ "rate": 0.001, "period": "1000000000s", "capacity": 1 })",
         "rules[0].rate"},
        {"smooth_bursty", R"({ "rate": 1e-300 })", "rules[0].rate"},
        {"smooth_warming_up", R"({ "rate": 1e-9, "warmup_period": "1s", "cold_factor": 3 })",
         "rules[0].rate"},
        // A quota beyond 1e12 (limit's own bound) overflowed the headers' integers.
        {"token_bucket", R"({ "rate": 1e300, "period": "1s", "burst": 1e300 })", "rules[0].burst"},
        {"leaky_bucket", R"({ "rate": 1, "period": "1s", "capacity": 1000000000001 })",
         "rules[0].capacity"},
        {"smooth_bursty", R"({ "rate": 1000000, "max_burst_seconds": 1000000000 })",
         "rules[0].max_burst_seconds"},
        {"smooth_warming_up", R"({ "rate": 1000000000, "warmup_period": "2000s" })",
         "rules[0].warmup_period"},
        // The edges pass.
        {"token_bucket", R"({ "rate": 1, "period": "1s", "burst": 999999999 })", ""},
        {"token_bucket", R"({ "rate": 1000000000000, "period": "1us", "burst": 1 })", ""},
        {"gcra", R"({ "rate": 1, "period": "499999999s", "burst": 1 })", ""},
        {"smooth_bursty", R"({ "rate": 2e-9 })", ""},
        {"smooth_warming_up", R"({ "rate": 1, "warmup_period": "1h", "cold_factor": 1000 })", ""},
        {"fixed_window", R"({ "limit": 1000000000000, "window": "277777h" })", ""},
    };
    for (const auto& r : rows) {
        CAPTURE(r.rule);
        auto e = errors_of(with_rule(r.algorithm, r.rule));
        if (std::string(r.error).empty()) {
            CHECK(e == "");
        } else {
            CHECK(e.find(std::string("f.json: limiters.l.") + r.error + ": ") != std::string::npos);
        }
    }
}

TEST_CASE("admin.listen may not take the port of listen") {
    // `check` said OK and `serve` failed: "cannot listen on admin address ...: Address already
    // in use". "::" is dual-stack; "0.0.0.0" covers IPv4 only.
    auto config = [](const std::string& listen, const std::string& admin) {
        return errors_of(R"({"listen": ")" + listen + R"(", "admin": { "listen": ")" + admin +
                         R"(" }, "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
          "routes": [ { "name": "r", "match": { "path_prefix": "/" }, "upstream": "u" } ] })");
    };
    CHECK(config("127.0.0.1:8080", "127.0.0.1:8080") ==
          "f.json: admin.listen: \"127.0.0.1:8080\" takes the port of listen (\"127.0.0.1:8080\"): "
          "both cannot bind\n");
    CHECK(config("0.0.0.0:8080", "localhost:8080") ==
          "f.json: admin.listen: \"127.0.0.1:8080\" takes the port of listen (\"0.0.0.0:8080\"): "
          "both cannot bind\n");
    CHECK(config("[::]:8080", "127.0.0.1:8080") != "");
    CHECK(config("127.0.0.1:8080", "[::]:8080") != "");
    CHECK(config("127.0.0.1:8080", "127.0.0.1:9901") == "");
    CHECK(config("127.0.0.1:8080", "[::1]:8080") == "");
    CHECK(config("0.0.0.0:8080", "[::1]:8080") == "");
}

TEST_CASE("a standard method in the wrong case and a strip_prefix that never applies are errors") {
    // Methods compare exactly: a route listing "get" matched no GET request.
    CHECK(errors_of(with_route(R"(, "methods": ["GET", "get", "Post"])")) ==
          "f.json: routes[0].match.methods[1]: \"get\" never matches: methods are case-sensitive "
          "(RFC 9110 §9.1), write \"GET\"\n"
          "f.json: routes[0].match.methods[2]: \"Post\" never matches: methods are "
          "case-sensitive (RFC 9110 §9.1), write \"POST\"\n");
    CHECK(errors_of(with_route(R"(, "methods": ["PURGE", "x-custom"])")) == "");
    auto route = [](const std::string& match, const std::string& strip) {
        return errors_of(R"({"listen": "127.0.0.1:8080",
          "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
          "routes": [ { "name": "r", "match": { )" +
                         match + R"( }, "upstream": "u", "strip_prefix": ")" + strip +
                         R"(" } ] })");
    };
    // The prefix was silently kept on every request.
    CHECK(route(R"("path_prefix": "/api/orders")", "/v1") ==
          "f.json: routes[0].strip_prefix: \"/v1\" begins no path this route matches: it would "
          "never be stripped\n");
    CHECK(route(R"("path": "/a/b")", "/b") != "");
    CHECK(route(R"("path_prefix": "/api/orders")", "/api") == "");
    CHECK(route(R"("path_prefix": "/api")", "/api/v1") == "");  // some paths start with it
    CHECK(route(R"("path": "/a/b")", "/a") == "");
    CHECK(route(R"("path": "/x", "path_prefix": "/api")", "/api") == "");
}
