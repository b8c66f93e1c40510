#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "limiters/redis/multiplexer.hpp"

using namespace rategate::limiters::redis;

namespace {
struct sink final : reply_sink {
    std::vector<std::pair<std::error_code, reply>> got;
    void on_reply(std::error_code ec, reply&& r) override { got.emplace_back(ec, std::move(r)); }
};
auto now() {
    return std::chrono::steady_clock::now();
}
}  // namespace

TEST_CASE("waiting commands are coalesced into one write") {
    multiplexer m;
    auto a = std::make_shared<sink>();
    auto b = std::make_shared<sink>();
    auto c = std::make_shared<sink>();
    m.push(encode_command({"GET", "a"}), a);
    m.push(encode_command({"GET", "b"}), b);
    m.push(encode_command({"SET", "c", "1"}), c);
    CHECK(m.has_waiting());
    auto out = m.prepare_write();
    CHECK(out ==
          "*2\r\n$3\r\nGET\r\n$1\r\na\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n*3\r\n$3\r\nSET\r\n$"
          "1\r\nc\r\n$1\r\n1\r\n");
    CHECK_FALSE(m.has_waiting());
    m.commit_write(now());
    CHECK(m.writes() == 1);
    CHECK(m.commands_written() == 3);
    CHECK(m.pending() == 3);
}

TEST_CASE("a write is counted even when every reply came before its completion ran") {
    // The event loop may run the reader's completion first: the replies retire the staged
    // entries, and the write's commit must still count the write and all its commands.
    multiplexer m;
    auto a = std::make_shared<sink>();
    auto b = std::make_shared<sink>();
    m.push(encode_command({"PING"}), a);
    m.push(encode_command({"PING"}), b);
    m.prepare_write();
    std::string wire = "+PONG\r\n+PONG\r\n";
    REQUIRE_FALSE(m.consume(wire.data(), wire.size()));
    CHECK(a->got.size() == 1);
    CHECK(b->got.size() == 1);
    CHECK(m.pending() == 0);
    m.commit_write(now());
    CHECK(m.writes() == 1);
    CHECK(m.commands_written() == 2);
    // One reply early, one after: the commit marks the one left and counts both.
    auto c = std::make_shared<sink>();
    auto d = std::make_shared<sink>();
    m.push(encode_command({"PING"}), c);
    m.push(encode_command({"PING"}), d);
    m.prepare_write();
    REQUIRE_FALSE(m.consume("+PONG\r\n", 7));
    m.commit_write(now());
    CHECK(m.writes() == 2);
    CHECK(m.commands_written() == 4);
    CHECK(m.oldest_written().has_value());
}

TEST_CASE("replies complete requests in FIFO order, fed one byte at a time") {
    multiplexer m;
    auto a = std::make_shared<sink>();
    auto b = std::make_shared<sink>();
    auto c = std::make_shared<sink>();
    m.push("x", a);
    m.push("y", b);
    m.push("z", c);
    m.prepare_write();
    m.commit_write(now());
    std::string wire = "$5\r\nhello\r\n:42\r\n*2\r\n*1\r\n+OK\r\n$-1\r\n";
    for (char ch : wire)
        REQUIRE_FALSE(m.consume(&ch, 1));
    REQUIRE(a->got.size() == 1);
    CHECK(a->got[0].second.str == "hello");
    REQUIRE(b->got.size() == 1);
    CHECK(b->got[0].second.integer == 42);
    REQUIRE(c->got.size() == 1);
    const auto& arr = c->got[0].second;
    CHECK(arr.type == reply::kind::array);
    REQUIRE(arr.elements.size() == 2);
    CHECK(arr.elements[0].elements[0].type == reply::kind::status);
    CHECK(arr.elements[0].elements[0].str == "OK");
    CHECK(arr.elements[1].type == reply::kind::nil);
    CHECK(m.pending() == 0);
}

TEST_CASE("an error reply is data for its own request only") {
    multiplexer m;
    auto a = std::make_shared<sink>();
    auto b = std::make_shared<sink>();
    m.push("x", a);
    m.push("y", b);
    m.prepare_write();
    m.commit_write(now());
    std::string wire = "-NOSCRIPT No matching script\r\n+PONG\r\n";
    REQUIRE_FALSE(m.consume(wire.data(), wire.size()));
    CHECK_FALSE(a->got[0].first);
    CHECK(a->got[0].second.is_error("NOSCRIPT"));
    CHECK(b->got[0].second.str == "PONG");
}

TEST_CASE("abandon before write removes the command; after write its reply is dropped") {
    multiplexer m;
    auto a = std::make_shared<sink>();
    auto b = std::make_shared<sink>();
    auto c = std::make_shared<sink>();
    auto ha = m.push(encode_command({"GET", "a"}), a);
    auto hb = m.push(encode_command({"GET", "b"}), b);
    m.abandon(ha);  // never written
    auto out = m.prepare_write();
    CHECK(out == encode_command({"GET", "b"}));
    m.commit_write(now());
    m.abandon(hb);  // written: its reply must still be consumed
    m.push(encode_command({"GET", "c"}), c);
    m.prepare_write();
    m.commit_write(now());
    std::string wire = "$2\r\nbb\r\n$2\r\ncc\r\n";
    REQUIRE_FALSE(m.consume(wire.data(), wire.size()));
    CHECK(a->got.empty());
    CHECK(b->got.empty());
    REQUIRE(c->got.size() == 1);
    CHECK(c->got[0].second.str == "cc");  // alignment held
}

TEST_CASE("a reply with an empty queue is a protocol violation") {
    multiplexer m;
    std::string wire = "+OK\r\n";
    CHECK(m.consume(wire.data(), wire.size()) == client_error::protocol_error);
}

TEST_CASE("garbage is a protocol error, and fail_all resets the parser") {
    multiplexer m;
    auto a = std::make_shared<sink>();
    auto b = std::make_shared<sink>();
    m.push("x", a);
    m.prepare_write();
    m.commit_write(now());
    std::string bad = "?what\r\n";
    CHECK(m.consume(bad.data(), bad.size()) == client_error::protocol_error);
    m.fail_all(client_error::connection_lost);
    REQUIRE(a->got.size() == 1);
    CHECK(a->got[0].first == client_error::connection_lost);
    m.push("y", b);
    m.prepare_write();
    m.commit_write(now());
    std::string good = ":1\r\n";
    REQUIRE_FALSE(m.consume(good.data(), good.size()));
    CHECK(b->got[0].second.integer == 1);
}

TEST_CASE("fail_all fails written and waiting requests alike") {
    multiplexer m;
    auto a = std::make_shared<sink>();
    auto b = std::make_shared<sink>();
    m.push("x", a);
    m.prepare_write();
    m.commit_write(now());
    m.push("y", b);
    m.fail_all(client_error::connection_lost);
    CHECK(a->got.size() == 1);
    CHECK(b->got.size() == 1);
    CHECK(m.pending() == 0);
}

TEST_CASE("a reply may arrive before the write is committed") {
    multiplexer m;
    auto a = std::make_shared<sink>();
    auto b = std::make_shared<sink>();
    m.push("x", a);
    m.prepare_write();
    std::string wire = ":7\r\n";
    REQUIRE_FALSE(m.consume(wire.data(), wire.size()));
    m.commit_write(now());
    CHECK(a->got.size() == 1);
    CHECK_FALSE(m.oldest_written());
    m.push("y", b);
    m.prepare_write();
    auto t = now();
    m.commit_write(t);
    CHECK(m.oldest_written() == t);
}

TEST_CASE("the oldest written command is tracked for the watchdog") {
    multiplexer m;
    auto a = std::make_shared<sink>();
    CHECK_FALSE(m.oldest_written());
    m.push("x", a);
    CHECK_FALSE(m.oldest_written());  // waiting is not written
    m.prepare_write();
    auto t = now();
    m.commit_write(t);
    CHECK(m.oldest_written() == t);
}

TEST_CASE("an absurd array length is a protocol error, not a multi-gigabyte allocation") {
    // Found by tests/fuzz/fuzz_resp: hiredis allocates the element table on the header alone.
    multiplexer m;
    auto a = std::make_shared<sink>();
    m.push("x", a);
    m.prepare_write();
    m.commit_write(now());
    std::string wire = "*1\r\n*1962335880\r\n";
    CHECK(m.consume(wire.data(), wire.size()) == client_error::protocol_error);
    CHECK(a->got.empty());
    m.fail_all(client_error::connection_lost);
    // Within the bound, arrays still parse.
    auto b = std::make_shared<sink>();
    m.push("y", b);
    m.prepare_write();
    m.commit_write(now());
    std::string ok = "*2\r\n:1\r\n*0\r\n";
    REQUIRE_FALSE(m.consume(ok.data(), ok.size()));
    REQUIRE(b->got.size() == 1);
    CHECK(b->got[0].second.elements.size() == 2);
}

TEST_CASE("the multiplexer owns its sinks: a waiter that went away leaves nothing dangling") {
    // The handshake crash: reply targets lived in a coroutine frame that was gone by the time
    // fail_all ran. Now the multiplexer shares ownership, and completes into a live sink.
    multiplexer m;
    std::weak_ptr<sink> watch;
    {
        auto a = std::make_shared<sink>();
        watch = a;
        m.push("x", a);
        m.push("y", a);
        m.prepare_write();
        m.commit_write(now());
    }  // the caller's reference is gone
    REQUIRE_FALSE(watch.expired());
    m.fail_all(client_error::handshake_failed);
    CHECK(watch.expired());  // completed twice (two requests), then released
    CHECK(m.pending() == 0);
}

TEST_CASE("every request completes exactly once across reply, expiry, abandon and fail_all") {
    multiplexer m;
    auto t0 = now();
    std::vector<std::shared_ptr<reply_slot>> slots;
    std::vector<multiplexer::handle> ids;
    for (int i = 0; i < 6; ++i) {
        slots.push_back(std::make_shared<reply_slot>());
        auto deadline = i == 1 ? t0 : multiplexer::clock::time_point::max();
        ids.push_back(m.push("x", slots.back(), 1, deadline));
    }
    m.prepare_write();
    m.commit_write(t0);
    CHECK(m.expire(t0 + std::chrono::seconds(1)) == 1);  // #1 times out, keeps its FIFO place
    CHECK(m.abandon(ids[2]));                            // #2 cancelled by its caller
    CHECK_FALSE(m.abandon(ids[1]));                      // already completed
    std::string wire = ":0\r\n:1\r\n:2\r\n:3\r\n";
    REQUIRE_FALSE(m.consume(wire.data(), wire.size()));  // replies for #0..#3
    m.fail_all(client_error::connection_lost);           // #4, #5
    CHECK(slots[0]->value().integer == 0);
    CHECK(slots[1]->error() == client_error::timeout);
    CHECK_FALSE(slots[2]->done());  // abandoned: its owner completes it (connection: cancelled)
    CHECK(slots[3]->value().integer == 3);
    CHECK(slots[4]->error() == client_error::connection_lost);
    CHECK(slots[5]->error() == client_error::connection_lost);
    m.fail_all(client_error::stopped);  // nothing left: no second completion
    CHECK(slots[5]->error() == client_error::connection_lost);
}

TEST_CASE("a sink that pushes while it is completed does not disturb fail_all") {
    struct pusher final : reply_sink {
        multiplexer* m = nullptr;
        int calls = 0;
        void on_reply(std::error_code, reply&&) override {
            if (++calls == 1) m->push("again", nullptr);
        }
    };
    multiplexer m;
    auto p = std::make_shared<pusher>();
    p->m = &m;
    m.push("x", p);
    m.push("y", p);
    m.fail_all(client_error::connection_lost);
    CHECK(p->calls == 2);
    CHECK(m.pending() == 1);  // the new one waits for the next connection
}

TEST_CASE("READONLY, LOADING, MASTERDOWN, CLUSTERDOWN, OOM and BUSY replies are flagged") {
    for (std::string code : {"READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "OOM", "BUSY"}) {
        multiplexer m;
        auto a = std::make_shared<sink>();
        m.push("x", a);
        m.push("y", nullptr);  // abandoned or fire-and-forget replies count too
        m.prepare_write();
        m.commit_write(now());
        std::string wire = "-" + code + " something\r\n-ERR other\r\n";
        REQUIRE_FALSE(m.consume(wire.data(), wire.size()));
        CHECK(a->got[0].second.is_unavailable_error());
        CHECK(m.take_unavailable() == code + " something");
        CHECK(m.take_unavailable().empty());
    }
    reply busykey{reply::kind::error, 0, "BUSYKEY Target key name already exists.", {}};
    CHECK_FALSE(busykey.is_unavailable_error());
    reply err{reply::kind::error, 0, "ERR wrong", {}};
    CHECK(err.error_code() == "ERR");
    CHECK_FALSE(err.is_unavailable_error());
}
