// Redis Sentinel, sans-I/O: the replies the connection reads from sentinels, and the config.
#include <doctest/doctest.h>

#include "config/config.hpp"
#include "limiters/redis/sentinel.hpp"
#include "tests/unit/reply_builders.hpp"

using namespace rategate::limiters::redis;
using namespace rategate::limiters::redis::test;

TEST_CASE("get-master-addr-by-name: an address, or nothing usable") {
    CHECK(parse_master_addr(array({bulk("10.0.0.5"), bulk("6380")})) == endpoint{"10.0.0.5", 6380});
    CHECK(parse_master_addr(array({bulk("::1"), bulk("6379")})) == endpoint{"::1", 6379});
    CHECK(parse_master_addr(array({bulk("redis-a.internal"), bulk("6379")})) ==
          endpoint{"redis-a.internal", 6379});
    struct {
        reply r;
        const char* why;
    } refused[] = {
        {reply{}, "nil: the sentinel does not know the master"},
        {error("NOAUTH Authentication required."), "an error"},
        {array({bulk("10.0.0.5")}), "one element"},
        {array({bulk("10.0.0.5"), bulk("6379"), bulk("x")}), "three elements"},
        {array({bulk("10.0.0.5"), bulk("0")}), "port 0"},
        {array({bulk("10.0.0.5"), bulk("65536")}), "port out of range"},
        {array({bulk("10.0.0.5"), bulk("63 79")}), "port with a space"},
        {array({bulk("10.0.0.5"), bulk("+6379")}), "port with a sign"},
        {array({bulk(""), bulk("6379")}), "empty host"},
        {array({bulk("a b"), bulk("6379")}), "host with a space"},
        {array({bulk("a\r\nb"), bulk("6379")}), "host with a line break"},
        {array({bulk("?"), bulk("6379")}), "host \"?\": Redis' unknown endpoint"},
    };
    for (const auto& c : refused) {
        INFO(c.why);
        CHECK_FALSE(parse_master_addr(c.r).has_value());
    }
}

TEST_CASE("+switch-master: only our master's event moves the connection") {
    auto msg = [](std::string payload) {
        return array({bulk("message"), bulk("+switch-master"), bulk(std::move(payload))});
    };
    CHECK(parse_switch_master(msg("mymaster 127.0.0.1 6379 127.0.0.1 6380"), "mymaster") ==
          endpoint{"127.0.0.1", 6380});
    CHECK_FALSE(parse_switch_master(msg("other 127.0.0.1 6379 127.0.0.1 6380"), "mymaster"));
    CHECK_FALSE(parse_switch_master(msg("mymaster 127.0.0.1 6379 127.0.0.1"), "mymaster"));
    CHECK_FALSE(parse_switch_master(msg("mymaster 127.0.0.1 6379 127.0.0.1 0"), "mymaster"));
    CHECK_FALSE(parse_switch_master(msg("mymasterX 127.0.0.1 6379 127.0.0.1 6380"), "mymaster"));
    CHECK_FALSE(parse_switch_master(msg("mymaster 127.0.0.1 6379 ? 6380"), "mymaster"));
    // The subscription's confirmation and other channels are not events.
    CHECK_FALSE(parse_switch_master(array({bulk("subscribe"), bulk("+switch-master"), reply{}}),
                                    "mymaster"));
    CHECK_FALSE(parse_switch_master(
        array({bulk("message"), bulk("+sdown"), bulk("mymaster 127.0.0.1 6379 127.0.0.1 6380")}),
        "mymaster"));
}

namespace {
std::string errors_of(const std::string& redis) {
    try {
        rategate::config::parse_config(R"({"listen": "127.0.0.1:8080",
          "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
          "routes": [ { "name": "r", "match": { "path_prefix": "/" }, "upstream": "u" } ],
          "redis": )" + redis + "}",
                                       "f.json");
        return "";
    } catch (const rategate::config::config_errors& e) {
        return e.what();
    }
}
}  // namespace

TEST_CASE("config: exactly one deployment; sentinel fields and credentials") {
    auto cfg = rategate::config::parse_config(R"({"listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "routes": [ { "name": "r", "match": { "path_prefix": "/" }, "upstream": "u" } ],
      "redis": { "sentinel": { "master": "mymaster", "nodes": ["10.0.0.5:26379", "[::1]:26380"],
                               "password": "s3" },
                 "username": "gw", "password": "d4", "db": 2 } })",
                                              "f.json");
    REQUIRE(cfg->redis);
    REQUIRE(cfg->redis->sentinel);
    CHECK(cfg->redis->sentinel->master == "mymaster");
    REQUIRE(cfg->redis->sentinel->nodes.size() == 2);
    CHECK(cfg->redis->sentinel->nodes[1].host == "::1");
    CHECK(cfg->redis->sentinel->nodes[1].port == 26380);
    CHECK(cfg->redis->sentinel->password == "s3");
    CHECK(cfg->redis->username == "gw");
    CHECK(cfg->redis->password == "d4");
    CHECK(cfg->redis->db == 2);

    CHECK(errors_of(R"({})") ==
          "f.json: redis: needs exactly one of \"url\", \"sentinel\" or \"cluster\"\n");
    CHECK(errors_of(R"({"url": "redis://a:1/0", "sentinel": {"master": "m", "nodes": ["a:1"]}})") ==
          "f.json: redis: needs exactly one of \"url\", \"sentinel\" or \"cluster\"\n");
    CHECK(errors_of(R"({"sentinel": {"master": "m", "nodes": []}})") ==
          "f.json: redis.sentinel.nodes: expected a non-empty array of \"host:port\"\n");
    CHECK(errors_of(R"({"sentinel": {"nodes": ["a:1"], "masters": "m"}})") ==
          "f.json: redis.sentinel.master: is required\n"
          "f.json: redis.sentinel.masters: unknown key \"masters\" (did you mean \"master\"?)\n");
    CHECK(errors_of(R"({"url": "redis://a:1/0", "db": 3})") ==
          "f.json: redis.db: only applies beside \"sentinel\" (the url names the database)\n");
    CHECK(errors_of(R"({"cluster": {"nodes": ["a:1"]}})") == "");
    // A url's user and password, and the password beside it overriding the url's.
    auto url = rategate::config::parse_config(R"({"listen": "127.0.0.1:8080",
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "routes": [ { "name": "r", "match": { "path_prefix": "/" }, "upstream": "u" } ],
      "redis": { "url": "redis://alice:pw@10.0.0.9:6390/1", "password": "other" } })",
                                              "f.json");
    CHECK(url->redis->username == "alice");
    CHECK(url->redis->password == "other");
    CHECK(url->redis->port == 6390);
}
