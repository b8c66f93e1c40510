#include <doctest/doctest.h>

#include "config/config.hpp"
#include "gateway/http/router.hpp"

using namespace rategate;

namespace {
std::shared_ptr<const config::config> routes_config() {
    return config::parse_config(R"({
      "listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "routes": [
        { "name": "api",        "match": { "path_prefix": "/api" },                 "upstream": "u" },
        { "name": "orders",     "match": { "path_prefix": "/api/orders" },          "upstream": "u" },
        { "name": "orders-get", "match": { "path_prefix": "/api/orders", "methods": ["GET"] }, "upstream": "u" },
        { "name": "exact",      "match": { "path": "/api/orders/special" },         "upstream": "u" },
        { "name": "hosted",     "match": { "path_prefix": "/h", "host": "Example.COM" }, "upstream": "u" }
      ]})",
                                "test.json");
}
std::string name_of(const config::route_config* r) {
    return r ? r->name : "<none>";
}
}  // namespace

TEST_CASE("exact path beats the longest prefix, which beats a shorter one") {
    auto cfg = routes_config();
    gateway::route_table t(*cfg);
    CHECK(name_of(t.match("GET", "/api/orders/special", "")) == "exact");
    CHECK(name_of(t.match("POST", "/api/orders/1", "")) == "orders");
    CHECK(name_of(t.match("POST", "/api/users", "")) == "api");
    CHECK(name_of(t.match("GET", "/other", "")) == "<none>");
}

TEST_CASE("methods narrow a route; among equal prefixes config order wins") {
    auto cfg = routes_config();
    gateway::route_table t(*cfg);
    // "orders" is first in config order among the two /api/orders prefixes and takes every method.
    CHECK(name_of(t.match("GET", "/api/orders", "")) == "orders");
    CHECK(name_of(t.match("DELETE", "/api/orders", "")) == "orders");
}

TEST_CASE("host matches without port and case") {
    auto cfg = routes_config();
    gateway::route_table t(*cfg);
    CHECK(name_of(t.match("GET", "/h/x", "example.com:8080")) == "hosted");
    CHECK(name_of(t.match("GET", "/h/x", "EXAMPLE.com")) == "hosted");
    CHECK(name_of(t.match("GET", "/h/x", "other.com")) == "<none>");
}

TEST_CASE("method-only route falls through to a less specific prefix for other methods") {
    auto cfg = config::parse_config(R"({
      "listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "routes": [
        { "name": "get-only", "match": { "path_prefix": "/a/b", "methods": ["GET"] }, "upstream": "u" },
        { "name": "root",     "match": { "path_prefix": "/" }, "upstream": "u" } ]})",
                                    "t.json");
    gateway::route_table t(*cfg);
    CHECK(name_of(t.match("GET", "/a/b/c", "")) == "get-only");
    CHECK(name_of(t.match("POST", "/a/b/c", "")) == "root");
}

TEST_CASE("strip_prefix keeps the query and never leaves an empty path") {
    CHECK(gateway::strip_path_prefix("/api/orders/1?x=2", "/api") == "/orders/1?x=2");
    CHECK(gateway::strip_path_prefix("/api", "/api") == "/");
    CHECK(gateway::strip_path_prefix("/api?q=1", "/api") == "/?q=1");
    CHECK(gateway::strip_path_prefix("/other", "/api") == "/other");
}
