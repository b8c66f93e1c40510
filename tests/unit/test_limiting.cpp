// The limiting pipeline's edges without a socket: the identity assembled from a request's
// fields (tests/unit/test_pipeline.cpp drives the checker itself), and the outcome turned into
// the refusal response, the access log's words and the headers.
#include <doctest/doctest.h>

#include <boost/beast/http/fields.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "gateway/limiting/identity.hpp"
#include "gateway/limiting/outcome.hpp"
#include "limiters/policy.hpp"

using namespace rategate;
namespace http = boost::beast::http;
using gateway::limiting::verdict;

namespace {

std::shared_ptr<const config::config> make_config(const char* user_identity) {
    return config::parse_config(std::string(R"({
      "listen": "127.0.0.1:8080",
      "identity": { "user": )") + user_identity +
                                    R"(,
                    "client_ip": { "trusted_proxies": ["10.0.0.0/8"] } },
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "limiters": {
        "by-key": { "scope": "header:X-Api-Key", "algorithm": "fixed_window",
                    "rules": [{ "limit": 5, "window": "1s" }] },
        "by-tenant": { "scope": "header:X-Tenant", "algorithm": "fixed_window",
                       "rules": [{ "limit": 5, "window": "1s" }] },
        "by-key-again": { "scope": "header:x-api-key", "algorithm": "fixed_window",
                          "rules": [{ "limit": 9, "window": "1s" }] },
        "per-user": { "scope": "user", "algorithm": "token_bucket", "on_missing_key": "deny",
                      "rules": [{ "rate": 1, "period": "1s", "burst": 2 }] }
      },
      "routes": [
        { "name": "keys", "match": { "path_prefix": "/k" }, "upstream": "u",
          "limiters": ["by-key", "by-tenant", "by-key-again"] },
        { "name": "users", "match": { "path_prefix": "/" }, "upstream": "u",
          "limiters": ["per-user"], "on_limit": { "status": 503, "message": "slow down" } } ]
    })",
                                "t.json");
}

gateway::limiting::request_identity identify(const config::config& cfg, const limiters::policy& pol,
                                             std::size_t route, const http::fields& f,
                                             std::string_view peer,
                                             const std::optional<std::string>& jwt_user) {
    return gateway::limiting::assemble_identity(
        cfg, gateway::identity::settings::from(cfg.identity), pol, route, f,
        gateway::identity::canonical_ip(peer).value_or(std::string()), jwt_user);
}

}  // namespace

TEST_CASE("identity: the user header, the client IP behind trusted proxies, header scopes") {
    auto cfg = make_config(R"({ "header": "X-User-Id" })");
    limiters::policy pol(*cfg);
    SUBCASE("user header: first field line, an empty one is no user") {
        http::fields f;
        f.insert("X-User-Id", "alice");
        f.insert("X-User-Id", "mallory");
        auto who = identify(*cfg, pol, 1, f, "192.0.2.1", {});
        CHECK(who.user == std::optional<std::string_view>("alice"));
        CHECK(who.ip == "192.0.2.1");
        CHECK(who.headers.empty());  // the route has no header scope
        http::fields empty;
        empty.insert("X-User-Id", "");
        CHECK(!identify(*cfg, pol, 1, empty, "192.0.2.1", {}).user);
        // Any case, among other fields: still the first line, even when it is empty.
        http::fields mixed;
        mixed.insert("X-Forwarded-For", "203.0.113.9");
        mixed.insert("x-user-ID", "");
        mixed.insert("X-User-Id", "bob");
        CHECK(!identify(*cfg, pol, 1, mixed, "192.0.2.1", {}).user);
        http::fields lower;
        lower.insert("Accept", "*/*");
        lower.insert("x-user-id", "carol");
        CHECK(identify(*cfg, pol, 1, lower, "192.0.2.1", {}).user ==
              std::optional<std::string_view>("carol"));
    }
    SUBCASE("a JWT user is never overridden by the user header") {
        setenv("RATEGATE_TEST_SECRET", "0123456789abcdef0123456789abcdef", 1);
        auto jwt = make_config(R"({ "jwt": { "algorithms": ["HS256"],
                                             "hmac_secret_env": "RATEGATE_TEST_SECRET" } })");
        limiters::policy jpol(*jwt);
        http::fields f;
        f.insert("X-User-Id", "mallory");
        CHECK(!identify(*jwt, jpol, 1, f, "192.0.2.1", {}).user);
        std::optional<std::string> verified = "alice";
        CHECK(identify(*jwt, jpol, 1, f, "192.0.2.1", verified).user ==
              std::optional<std::string_view>("alice"));
    }
    SUBCASE("client IP: forwarding header only from a trusted peer, every field line") {
        http::fields f;
        f.insert("X-Forwarded-For", "198.51.100.7, 10.1.1.1");
        f.insert("X-Forwarded-For", "10.2.2.2");
        CHECK(identify(*cfg, pol, 1, f, "10.9.9.9", {}).ip == "198.51.100.7");
        CHECK(identify(*cfg, pol, 1, f, "192.0.2.1", {}).ip == "192.0.2.1");
    }
    SUBCASE("header scopes: each name once, first field line, absent and empty told apart") {
        REQUIRE(pol.header_names(0).size() == 2);  // X-Api-Key and x-api-key are one field
        http::fields f;
        f.insert("x-api-KEY", "k1");
        f.insert("X-Api-Key", "k2");
        f.insert("X-Tenant", "");
        auto who = identify(*cfg, pol, 0, f, "192.0.2.1", {});
        auto view = who.view();
        CHECK(view.header("X-Api-Key") == std::optional<std::string_view>("k1"));
        CHECK(view.header("x-api-key") == std::optional<std::string_view>("k1"));
        CHECK(view.header("X-Tenant") == std::optional<std::string_view>(""));
        http::fields none;
        auto nobody = identify(*cfg, pol, 0, none, "192.0.2.1", {});
        CHECK(!nobody.view().header("X-Api-Key"));
        CHECK(!nobody.view().header("X-Other"));  // not a scope of the route: never read
    }
}

TEST_CASE("outcome: one word per verdict, the refusal response, the logged limiter") {
    auto cfg = make_config(R"({ "header": "X-User-Id" })");
    limiters::policy pol(*cfg);
    CHECK(std::string(to_string(verdict::allowed)) == "allowed");
    CHECK(std::string(to_string(verdict::delayed)) == "delayed");
    CHECK(std::string(to_string(verdict::shadow_limited)) == "shadow_limited");
    CHECK(std::string(to_string(verdict::limited)) == "limited");
    CHECK(std::string(to_string(verdict::denied)) == "denied");
    CHECK(std::string(to_string(verdict::invalid_identity)) == "invalid_identity");
    CHECK(std::string(to_string(verdict::error)) == "error");

    const auto& route = cfg->routes[1];
    const auto* layer = pol.chain(1)[0];
    gateway::limiting::outcome o;
    o.forward = false;
    o.decider = o.header = layer;

    o.what = verdict::limited;
    o.decision.allowed = false;
    o.decision.decider = 0;
    o.decision.retry_us = 1'500'000;  // 1.5 s → Retry-After 2
    o.decision.header_layer = 0;
    o.decision.remaining = 0;
    o.decision.reset_us = 2'000'000;
    auto res = gateway::limiting::refusal_response(o, route, true, 11, false);
    CHECK(res.result_int() == 503);  // the route's on_limit status
    CHECK(res[http::field::retry_after] == "2");
    auto body = nlohmann::json::parse(res.body());
    CHECK(body["error"] == "rate_limited");
    CHECK(body["message"] == "slow down");
    CHECK(body["limiter"] == "per-user");
    CHECK(body["retry_after_ms"] == 1500);
    CHECK(res.find("RateLimit-Policy") != res.end());  // the route's default header style
    CHECK(gateway::limiting::log_layer(o) == "per-user");

    o.what = verdict::denied;
    res = gateway::limiting::refusal_response(o, route, true, 11, true);
    CHECK(res.result_int() == 403);
    CHECK(res.body().empty());  // HEAD
    CHECK(res[http::field::content_length] != "0");

    o.what = verdict::invalid_identity;
    res = gateway::limiting::refusal_response(o, route, false, 11, false);
    CHECK(res.result_int() == 400);
    CHECK(nlohmann::json::parse(res.body())["error"] == "invalid_identity");
    CHECK(!res.keep_alive());

    o.what = verdict::error;
    o.decider = o.header = nullptr;
    res = gateway::limiting::refusal_response(o, route, true, 10, false);
    CHECK(res.result_int() == 503);
    CHECK(nlohmann::json::parse(res.body())["error"] == "limiter_unavailable");
    CHECK(gateway::limiting::log_layer(o) == "-");

    // Admitted: the most restrictive layer's headers, and the log names it.
    gateway::limiting::outcome pass;
    pass.header = layer;
    pass.decision.header_layer = 0;
    pass.decision.remaining = 1;
    CHECK(gateway::limiting::headers_of(pass));
    CHECK(gateway::limiting::log_layer(pass) == "per-user");
    CHECK(!gateway::limiting::headers_of(gateway::limiting::outcome{}));
}
