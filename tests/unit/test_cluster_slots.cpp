// Redis Cluster, sans-I/O: key slots, the slot map from CLUSTER SLOTS / CLUSTER SHARDS, and the
// redirection replies, all from hand-built replies (the shapes are those redis-server 7.0.15
// sent to tests/integration/harness.py's ClusterSet).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "limiters/keys.hpp"
#include "limiters/redis/cluster_slots.hpp"
#include "tests/unit/reply_builders.hpp"

using namespace rategate::limiters::redis;
using namespace rategate::limiters::redis::test;

namespace {
const reply nil{};

const endpoint asked{"10.0.0.9", 7000};
const std::string id_a(40, 'a'), id_b(40, 'b'), id_c(40, 'c'), id_r(40, 'r');

// One node of a CLUSTER SLOTS range as 7.0 sends it: endpoint, port, id, metadata (a map, an
// empty array in RESP2).
reply slots_node(reply host, std::int64_t port, const std::string& id) {
    return array({std::move(host), integer(port), bulk(id), array({})});
}
reply slots_range(std::int64_t start, std::int64_t end, std::vector<reply> nodes) {
    std::vector<reply> e{integer(start), integer(end)};
    for (auto& n : nodes)
        e.push_back(std::move(n));
    return array(std::move(e));
}
// The three-master cluster redis-cli --cluster create makes: 0-5460, 5461-10922, 10923-16383.
reply three_masters_slots() {
    return array({
        slots_range(
            0, 5460,
            {slots_node(bulk("127.0.0.1"), 7001, id_a), slots_node(bulk("127.0.0.1"), 7004, id_r)}),
        slots_range(5461, 10922, {slots_node(bulk("127.0.0.1"), 7002, id_b)}),
        slots_range(10923, 16383, {slots_node(bulk("127.0.0.1"), 7003, id_c)}),
    });
}

// One node of a CLUSTER SHARDS shard: a flat map, fields in 7.0's order.
reply shard_node(const std::string& id, std::int64_t port, reply endpoint, const std::string& role,
                 const std::string& health = "online") {
    return array({bulk("id"), bulk(id), bulk("port"), integer(port), bulk("ip"), bulk("127.0.0.1"),
                  bulk("endpoint"), std::move(endpoint), bulk("role"), bulk(role),
                  bulk("replication-offset"), integer(14), bulk("health"), bulk(health)});
}
reply shard(std::vector<std::int64_t> slots, std::vector<reply> nodes) {
    std::vector<reply> s;
    for (auto v : slots)
        s.push_back(integer(v));
    return array({bulk("slots"), array(std::move(s)), bulk("nodes"), array(std::move(nodes))});
}
reply three_masters_shards() {
    return array({
        shard({5461, 10922}, {shard_node(id_b, 7002, bulk("127.0.0.1"), "master")}),
        shard({0, 5460}, {shard_node(id_a, 7001, bulk("127.0.0.1"), "master"),
                          shard_node(id_r, 7004, bulk("127.0.0.1"), "replica")}),
        shard({10923, 16383}, {shard_node(id_c, 7003, bulk("127.0.0.1"), "master")}),
    });
}

// Checks a parsed three-master map: who owns which slot, whatever the masters' order.
void check_three_masters(const slot_map& m) {
    REQUIRE(m.masters().size() == 3);
    CHECK(m.complete());
    auto port_of = [&](std::uint16_t slot) {
        auto o = m.owner(slot);
        REQUIRE(o.has_value());
        REQUIRE(*o < m.masters().size());
        return m.masters()[*o].addr.port;
    };
    CHECK(port_of(0) == 7001);
    CHECK(port_of(5460) == 7001);
    CHECK(port_of(5461) == 7002);
    CHECK(port_of(10922) == 7002);
    CHECK(port_of(10923) == 7003);
    CHECK(port_of(16383) == 7003);
    for (const auto& n : m.masters())
        CHECK(n.addr.host == "127.0.0.1");
    CHECK(m.masters()[*m.owner(0)].id == id_a);
    CHECK_FALSE(m.owner(16384).has_value());
}
}  // namespace

TEST_CASE("key_slot: CRC16/XMODEM mod 16384 with hash tags, as redis-server computes it") {
    // The values on the right came from redis-server 7.0.15's CLUSTER KEYSLOT (`redis-cli -x
    // CLUSTER KEYSLOT` on a --cluster-enabled node, the key on stdin so that NUL passes).
    struct {
        std::string key;
        std::uint16_t slot;
    } known[] = {
        {"123456789", 12739},  // the spec's check value: CRC16 0x31C3 = 12739 mod 16384
        {"", 0},
        {"foo", 12182},
        {"bar", 5061},
        {"zap", 6469},
        {"user1000", 3443},
        {"{user1000}.following", 3443},
        {"{user1000}.followers", 3443},
        {"foo{}{bar}", 8363},     // empty tag: the whole key
        {"foo{{bar}}zap", 4015},  // hashes "{bar"
        {"{bar", 4015},
        {"foo{bar}{zap}", 5061},  // hashes "bar"
        {"{}", 15257},
        {"}{", 12793},
        {"a{b", 13340},  // no '}' after the '{': the whole key
        {"a}b{c}", 7365},
        {"c", 7365},
        {"{a}b", 15495},
        {"caf\xc3\xa9", 5735},
        {std::string("\xff\x00\x01", 3), 8002},
        // Our layer keys: the prefix never matters; a scoped key's tag is its identity (every
        // limiter of one user shares a slot), a global key's its limiter and shape.
        {"rategate:per-user~0a1b2c3d|{u=alice}", 7908},
        {"other-prefix:per-user~0a1b2c3d|{u=alice}", 7908},
        {"rategate:per-burst~0a1b2c3d|{u=alice}", 7908},
        {"u=alice", 7908},
        {"rategate:per-user~0a1b2c3d|{u=bob}", 2373},
        {"rategate:per-user~0a1b2c3d|{u=alice|r=api}", 6565},
        {"rategate:{global-api~9f8e7d6c}", 4499},
        {"rategate:per-ip~12345678|{ip=2001%3Adb8%3A%3A1}", 16083},
        {"rategate:per-route~deadbeef|{r=api}", 5607},
        {"rategate:hdr~cafebabe|{h=abc%7Bdef%7D}", 8692},
    };
    for (const auto& k : known) {
        INFO("key: ", k.key);
        CHECK(key_slot(k.key) == k.slot);
    }
    // The table's layer keys are the ones keys.cpp builds.
    using rategate::limiters::layer_key;
    CHECK(layer_key("rategate:", "per-user", "u=alice", "0a1b2c3d") ==
          "rategate:per-user~0a1b2c3d|{u=alice}");
    CHECK(layer_key("rategate:", "global-api", "", "9f8e7d6c") == "rategate:{global-api~9f8e7d6c}");
    CHECK(layer_key("rategate:", "hdr", "h=" + rategate::limiters::escape_key_part("abc{def}"),
                    "cafebabe") == "rategate:hdr~cafebabe|{h=abc%7Bdef%7D}");
    // A value with braces cannot move its key to another slot: escaping keeps them out.
    auto a = layer_key("p:", "l", "u=" + rategate::limiters::escape_key_part("}x{"), "00000000");
    CHECK(key_slot(a) == key_slot("u=%7Dx%7B"));
}

TEST_CASE("slot map from CLUSTER SLOTS: non-contiguous ranges, and the endpoint rules") {
    auto m = parse_cluster_slots(three_masters_slots(), asked);
    REQUIRE(m.has_value());
    check_three_masters(*m);

    // A master with two ranges is listed once; a hole leaves the map incomplete.
    auto two = parse_cluster_slots(
        array({slots_range(0, 99, {slots_node(bulk("127.0.0.1"), 7001, id_a)}),
               slots_range(100, 199, {slots_node(bulk("127.0.0.1"), 7002, id_b)}),
               slots_range(200, 16383, {slots_node(bulk("127.0.0.1"), 7001, id_a)})}),
        asked);
    REQUIRE(two.has_value());
    CHECK(two->masters().size() == 2);
    CHECK(two->complete());
    CHECK(two->owner(0) == two->owner(16383));
    CHECK(two->owner(0) != two->owner(150));
    auto holed = parse_cluster_slots(
        array({slots_range(0, 99, {slots_node(bulk("127.0.0.1"), 7001, id_a)})}), asked);
    REQUIRE(holed.has_value());
    CHECK_FALSE(holed->complete());
    CHECK(holed->owner(99) == std::optional<std::size_t>(0));
    CHECK_FALSE(holed->owner(100).has_value());
    auto empty = parse_cluster_slots(array({}), asked);  // a cluster with no slots assigned yet
    REQUIRE(empty.has_value());
    CHECK(empty->masters().empty());
    CHECK_FALSE(empty->complete());

    // Redis < 4 sent [ip, port] only; an IPv6 endpoint is a host like any other.
    auto old = parse_cluster_slots(
        array({slots_range(0, 16383, {array({bulk("::1"), integer(6379)})})}), asked);
    REQUIRE(old.has_value());
    CHECK(old->masters().front() == cluster_node{{"::1", 6379}, ""});

    // nil or "": the host we asked, with the reply's port.
    for (const auto& host : {nil, bulk("")}) {
        auto lb = parse_cluster_slots(
            array({slots_range(0, 16383, {slots_node(host, 7005, id_a)})}), asked);
        REQUIRE(lb.has_value());
        CHECK(lb->masters().front().addr == endpoint{"10.0.0.9", 7005});
        CHECK(lb->complete());
    }
    // "?": an unknown node, not the one asked: its slots have no owner.
    auto unknown = parse_cluster_slots(
        array({slots_range(0, 8191, {slots_node(bulk("?"), 7001, id_a)}),
               slots_range(8192, 16383, {slots_node(bulk("127.0.0.1"), 7002, id_b)})}),
        asked);
    REQUIRE(unknown.has_value());
    CHECK(unknown->masters().size() == 1);
    CHECK_FALSE(unknown->owner(0).has_value());
    CHECK(unknown->owner(8192) == std::optional<std::size_t>(0));
    CHECK_FALSE(unknown->complete());

    auto one = [](reply node, std::int64_t start = 0, std::int64_t end = 16383) {
        return array({slots_range(start, end, {std::move(node)})});
    };
    struct {
        reply r;
        const char* why;
    } refused[] = {
        {error("ERR This instance has cluster support disabled"), "an error"},
        {nil, "nil"},
        {bulk("0 16383"), "not an array"},
        {array({integer(0)}), "a range that is not an array"},
        {array({array({integer(0), integer(16383)})}), "a range without a master"},
        {array({array({bulk("0"), integer(16383), slots_node(bulk("h"), 1, id_a)})}),
         "start as a string"},
        {array({array({integer(0), nil, slots_node(bulk("h"), 1, id_a)})}), "end nil"},
        {one(slots_node(bulk("h"), 7001, id_a), -1, 5), "negative start"},
        {one(slots_node(bulk("h"), 7001, id_a), 0, 16384), "end beyond 16383"},
        {one(slots_node(bulk("h"), 7001, id_a), 10, 9), "start > end"},
        {array({slots_range(0, 100, {slots_node(bulk("h"), 7001, id_a)}),
                slots_range(100, 16383, {slots_node(bulk("h"), 7002, id_b)})}),
         "slot 100 twice"},
        {one(slots_node(bulk("h"), 0, id_a)), "port 0"},
        {one(slots_node(bulk("h"), 65536, id_a)), "port 65536"},
        {one(slots_node(bulk("h"), -6379, id_a)), "negative port"},
        {one(array({bulk("h"), bulk("7001")})), "port as a string"},
        {one(array({bulk("h")})), "a node without a port"},
        {one(array({integer(1), integer(7001)})), "host as an integer"},
        {one(array({bulk("h"), integer(7001), integer(5)})), "id as an integer"},
        {one(bulk("h:7001")), "a node that is not an array"},
        {one(slots_node(bulk("a b"), 7001, id_a)), "host with a space"},
        {one(slots_node(bulk("a\r\nb"), 7001, id_a)), "host with a line break"},
        {one(slots_node(bulk(std::string(256, 'h')), 7001, id_a)), "host over 255 bytes"},
        {array({slots_range(0, 16383,
                            {slots_node(bulk("h"), 7001, id_a), slots_node(bulk("h"), 0, id_r)})}),
         "a replica with port 0"},
    };
    for (const auto& c : refused) {
        INFO(c.why);
        CHECK_FALSE(parse_cluster_slots(c.r, asked).has_value());
    }
    // "" needs a host to stand for.
    CHECK_FALSE(parse_cluster_slots(one(slots_node(bulk(""), 7001, id_a)), endpoint{"", 7000}));
}

TEST_CASE("slot map from CLUSTER SHARDS: failed masters, and the endpoint rules") {
    auto m = parse_cluster_shards(three_masters_shards(), asked);
    REQUIRE(m.has_value());
    check_three_masters(*m);

    // After a failover 7.0 lists the dead master as a shard of its own, role master, health
    // "fail", no slots; 7.2+ keeps it in its old shard beside the promoted replica.
    auto after_7_0 = parse_cluster_shards(
        array({shard({0, 16383}, {shard_node(id_r, 7004, bulk("127.0.0.1"), "master")}),
               shard({}, {shard_node(id_a, 7001, bulk("127.0.0.1"), "master", "fail")})}),
        asked);
    REQUIRE(after_7_0.has_value());
    REQUIRE(after_7_0->masters().size() == 1);
    CHECK(after_7_0->masters().front().addr.port == 7004);
    CHECK(after_7_0->complete());
    auto after_7_2 = parse_cluster_shards(
        array({shard({0, 16383}, {shard_node(id_a, 7001, bulk("127.0.0.1"), "master", "failed"),
                                  shard_node(id_r, 7004, bulk("127.0.0.1"), "master")})}),
        asked);
    REQUIRE(after_7_2.has_value());
    REQUIRE(after_7_2->masters().size() == 1);
    CHECK(after_7_2->masters().front() == cluster_node{{"127.0.0.1", 7004}, id_r});
    // A lone master that fails still owns its slots (the cluster says CLUSTERDOWN meanwhile).
    auto down = parse_cluster_shards(
        array({shard({0, 16383}, {shard_node(id_a, 7001, bulk("127.0.0.1"), "master", "fail")})}),
        asked);
    REQUIRE(down.has_value());
    CHECK(down->complete());

    // Several ranges in one shard; unknown fields skipped; "hostname" and "tls-port" accepted.
    auto ranges = parse_cluster_shards(
        array(
            {array({bulk("slots"), array({integer(0), integer(10), integer(20), integer(16383)}),
                    bulk("future-field"), array({nil}), bulk("nodes"),
                    array({array({bulk("id"), bulk(id_a), bulk("port"), integer(7001),
                                  bulk("tls-port"), integer(7101), bulk("hostname"),
                                  bulk("redis-a"), bulk("endpoint"), bulk("redis-a"), bulk("role"),
                                  bulk("master"), bulk("shard-id"), bulk("x")})})})}),
        asked);
    REQUIRE(ranges.has_value());
    CHECK(ranges->masters().front().addr == endpoint{"redis-a", 7001});
    CHECK(ranges->owner(10).has_value());
    CHECK_FALSE(ranges->owner(11).has_value());
    CHECK(ranges->owner(20).has_value());

    // No "endpoint" field: the "ip". nil or "": the host asked. "?": no owner.
    auto no_endpoint = parse_cluster_shards(
        array({shard({0, 16383},
                     {array({bulk("id"), bulk(id_a), bulk("port"), integer(7001), bulk("ip"),
                             bulk("10.1.1.1"), bulk("role"), bulk("master")})})}),
        asked);
    REQUIRE(no_endpoint.has_value());
    CHECK(no_endpoint->masters().front().addr == endpoint{"10.1.1.1", 7001});
    for (const auto& host : {nil, bulk("")}) {
        auto lb = parse_cluster_shards(
            array({shard({0, 16383}, {shard_node(id_a, 7005, host, "master")})}), asked);
        REQUIRE(lb.has_value());
        CHECK(lb->masters().front().addr == endpoint{"10.0.0.9", 7005});
    }
    auto unknown = parse_cluster_shards(
        array({shard({0, 99}, {shard_node(id_a, 7001, bulk("?"), "master")}),
               shard({100, 16383}, {shard_node(id_b, 7002, bulk("127.0.0.1"), "master")})}),
        asked);
    REQUIRE(unknown.has_value());
    CHECK(unknown->masters().size() == 1);
    CHECK_FALSE(unknown->owner(99).has_value());
    CHECK(unknown->owner(100).has_value());

    auto lone = [](reply node) { return array({shard({0, 16383}, {std::move(node)})}); };
    struct {
        reply r;
        const char* why;
    } refused[] = {
        {error("ERR unknown subcommand 'SHARDS'"), "an error (Redis before 7.0)"},
        {nil, "nil"},
        {array({bulk("slots")}), "a shard that is not an array"},
        {array({array({bulk("slots"), array({})})}), "a shard without nodes"},
        {array({array({bulk("nodes"), array({})})}), "a shard without slots"},
        {array({array({bulk("slots"), array({}), bulk("nodes")})}), "odd-length shard map"},
        {array({array({integer(1), array({}), bulk("nodes"), array({})})}), "a key not a string"},
        {array({array({bulk("slots"), bulk("0-16383"), bulk("nodes"), array({})})}),
         "slots as a string"},
        {array({array(
             {bulk("slots"), array({}), bulk("slots"), array({}), bulk("nodes"), array({})})}),
         "slots twice"},
        {array({shard({0}, {shard_node(id_a, 7001, bulk("h"), "master")})}), "odd slot count"},
        {array({shard({0, 16384}, {shard_node(id_a, 7001, bulk("h"), "master")})}),
         "slot beyond 16383"},
        {array({shard({5, 4}, {shard_node(id_a, 7001, bulk("h"), "master")})}), "start > end"},
        {array({shard({0, 10, 5, 16383}, {shard_node(id_a, 7001, bulk("h"), "master")})}),
         "overlapping ranges"},
        {array({shard({0, 16383}, {shard_node(id_a, 7001, bulk("h"), "master")}),
                shard({0, 0}, {shard_node(id_b, 7002, bulk("h"), "master")})}),
         "slot 0 in two shards"},
        {array({array({bulk("slots"), array({bulk("0"), bulk("16383")}), bulk("nodes"),
                       array({shard_node(id_a, 7001, bulk("h"), "master")})})}),
         "slots as strings"},
        {lone(shard_node(id_a, 7001, bulk("h"), "replica")), "slots but no master"},
        {array({shard({0, 16383}, {shard_node(id_a, 7001, bulk("h"), "master"),
                                   shard_node(id_b, 7002, bulk("h"), "master")})}),
         "two live masters in a shard"},
        {lone(shard_node(id_a, 0, bulk("h"), "master")), "port 0"},
        {lone(shard_node(id_a, 65536, bulk("h"), "master")), "port 65536"},
        {array({shard({}, {shard_node(id_a, 0, bulk("h"), "master")})}),
         "port 0 in a shard without slots"},
        {lone(array({bulk("id"), bulk(id_a), bulk("tls-port"), integer(7101), bulk("endpoint"),
                     bulk("h"), bulk("role"), bulk("master")})),
         "a TLS-only master: no port"},
        {lone(array(
             {bulk("id"), bulk(id_a), bulk("port"), integer(7001), bulk("role"), bulk("master")})),
         "neither endpoint nor ip"},
        {lone(array({bulk("port"), bulk("7001"), bulk("endpoint"), bulk("h"), bulk("role"),
                     bulk("master")})),
         "port as a string"},
        {lone(array({bulk("port"), integer(7001), bulk("endpoint"), integer(1), bulk("role"),
                     bulk("master")})),
         "endpoint as an integer"},
        {lone(array({bulk("port"), integer(7001), bulk("endpoint"), bulk("h"), bulk("role")})),
         "odd-length node map"},
        {lone(array({bulk("port"), integer(7001), bulk("port"), integer(7002), bulk("endpoint"),
                     bulk("h"), bulk("role"), bulk("master")})),
         "port twice"},
        {lone(array({bulk("port"), integer(7001), bulk("endpoint"), bulk("h"), bulk("role"),
                     bulk("master"), bulk("replication-offset"), bulk("14")})),
         "replication-offset as a string"},
        {lone(shard_node(id_a, 7001, bulk("a b"), "master")), "host with a space"},
        {lone(bulk("node")), "a node that is not an array"},
    };
    for (const auto& c : refused) {
        INFO(c.why);
        CHECK_FALSE(parse_cluster_shards(c.r, asked).has_value());
    }
}

TEST_CASE("slot redirections: MOVED and ASK; TRYAGAIN and CLUSTERDOWN") {
    CHECK(parse_redirect(error("MOVED 3999 127.0.0.1:6381"), asked) ==
          redirect{redirect::moved, 3999, {"127.0.0.1", 6381}});
    CHECK(parse_redirect(error("ASK 3999 127.0.0.1:6381"), asked) ==
          redirect{redirect::ask, 3999, {"127.0.0.1", 6381}});
    CHECK(parse_redirect(error("MOVED 0 redis-b.internal:6379"), asked) ==
          redirect{redirect::moved, 0, {"redis-b.internal", 6379}});
    CHECK(parse_redirect(error("MOVED 16383 h:65535"), asked) ==
          redirect{redirect::moved, 16383, {"h", 65535}});
    // IPv6 without brackets: the port follows the last ':'.
    CHECK(parse_redirect(error("MOVED 1 ::1:6381"), asked) ==
          redirect{redirect::moved, 1, {"::1", 6381}});
    CHECK(parse_redirect(error("ASK 2 2001:db8::7:6381"), asked) ==
          redirect{redirect::ask, 2, {"2001:db8::7", 6381}});
    // No host: a node that does not know its address; the host we asked.
    CHECK(parse_redirect(error("MOVED 1 :6381"), asked) ==
          redirect{redirect::moved, 1, {"10.0.0.9", 6381}});

    struct {
        reply r;
        const char* why;
    } refused[] = {
        {status("MOVED 1 h:6381"), "a status, not an error"},
        {bulk("MOVED 1 h:6381"), "a bulk string"},
        {error("ERR MOVED 1 h:6381"), "another error"},
        {error("MOVEDX 1 h:6381"), "another code"},
        {error("moved 1 h:6381"), "lower case"},
        {error("MOVED"), "nothing after the code"},
        {error("MOVED 1"), "no address"},
        {error("MOVED 1 h"), "no port"},
        {error("MOVED 1 h:"), "empty port"},
        {error("MOVED 1 h:0"), "port 0"},
        {error("MOVED 1 h:65536"), "port 65536"},
        {error("MOVED 1 h:+6381"), "port with a sign"},
        {error("MOVED 1 h:6381 "), "trailing space"},
        {error("MOVED 1 h:6381 x"), "a fourth word"},
        {error("MOVED 16384 h:6381"), "slot 16384"},
        {error("MOVED -1 h:6381"), "negative slot"},
        {error("MOVED  1 h:6381"), "two spaces"},
        {error("MOVED x h:6381"), "slot not a number"},
        {error("MOVED 99999999999 h:6381"), "slot overflowing"},
        {error("MOVED 1 ?:6381"), "unknown endpoint"},
        {error("MOVED 1 a\tb:6381"), "host with a tab"},
    };
    for (const auto& c : refused) {
        INFO(c.why);
        CHECK_FALSE(parse_redirect(c.r, asked).has_value());
    }
    CHECK_FALSE(parse_redirect(error("MOVED 1 :6381"), endpoint{"", 7000}).has_value());

    CHECK(is_tryagain(error("TRYAGAIN Multiple keys request during rehashing of slot")));
    CHECK(is_clusterdown(error("CLUSTERDOWN The cluster is down")));
    CHECK(is_clusterdown(error("CLUSTERDOWN Hash slot not served")));
    CHECK_FALSE(is_tryagain(status("TRYAGAIN")));
    CHECK_FALSE(is_tryagain(error("TRYAGAINX later")));
    CHECK_FALSE(is_clusterdown(error("ERR CLUSTERDOWN")));
    CHECK_FALSE(is_clusterdown(bulk("CLUSTERDOWN")));
    CHECK_FALSE(is_tryagain(error("MOVED 1 h:1")));
}
