// The Redis client against a real redis-server started on a free port by each test.
#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <thread>

#include "limiters/redis/connection.hpp"
#include "tests/support/redis_server.hpp"

namespace net = boost::asio;
using namespace rategate::limiters::redis;
using namespace std::chrono_literals;
using rategate::test::redis_server;

namespace {

template <class... A>
std::vector<std::string_view> strings(A... a) {
    return {std::string_view(a)...};
}

// Runs the io_context until `aw` completes; fails the test after `cap` of wall-clock time.
template <class T>
T run(net::io_context& ioc, net::awaitable<T> aw, std::chrono::seconds cap = 20s) {
    auto fut = net::co_spawn(ioc, std::move(aw), net::use_future);
    auto deadline = std::chrono::steady_clock::now() + cap;
    while (fut.wait_for(0s) != std::future_status::ready) {
        REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, "wall-clock cap exceeded");
        ioc.run_one_for(10ms);
    }
    return fut.get();
}

net::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    net::steady_timer t(co_await net::this_coro::executor, d);
    co_await t.async_wait(net::use_awaitable);
}

// Waits until the connection reports connected (or `cap` passes).
net::awaitable<bool> wait_connected(connection& c, std::chrono::milliseconds cap = 5000ms) {
    auto until = std::chrono::steady_clock::now() + cap;
    while (c.state() == connection::health::down && std::chrono::steady_clock::now() < until)
        co_await sleep_for(10ms);
    co_return c.state() != connection::health::down;
}

connection_settings settings_for(const redis_server& s) {
    connection_settings cs;
    cs.port = s.port();
    cs.command_timeout = 2000ms;
    cs.watchdog = 5000ms;
    return cs;
}

const script incr_script{"incr_by", "return redis.call('INCRBY', KEYS[1], ARGV[1])"};

}  // namespace

TEST_CASE("exec returns replies, and an error reply is data") {
    redis_server server;
    net::io_context ioc;
    connection c(ioc.get_executor(), settings_for(server));
    c.start();
    run(ioc, [&]() -> net::awaitable<void> {
        REQUIRE(co_await wait_connected(c));
        auto set = co_await c.exec(command("SET", "k", "v"));
        CHECK_FALSE(set.ec);
        CHECK(set.value.str == "OK");
        auto get = co_await c.exec(command("GET", "k"));
        CHECK(get.value.str == "v");
        auto bad = co_await c.exec(command("INCR", "k"));
        CHECK_FALSE(bad.ec);
        CHECK(bad.value.is_error());
        auto after = co_await c.exec(command("GET", "k"));
        CHECK(after.value.str == "v");
    }());
}

TEST_CASE("1,000 concurrent execs go out in far fewer writes than commands") {
    redis_server server;
    net::io_context ioc;
    connection c(ioc.get_executor(), settings_for(server));
    c.start();
    run(ioc, wait_connected(c));
    auto before = c.stats();
    int ok = 0;
    std::vector<std::future<void>> calls;
    for (int i = 0; i < 1000; ++i)
        calls.push_back(net::co_spawn(
            ioc,
            [&, i]() -> net::awaitable<void> {
                auto r = co_await c.exec(command("INCR", "counter"));
                if (!r.ec && r.value.type == reply::kind::integer) ++ok;
            },
            net::use_future));
    run(ioc, [&]() -> net::awaitable<void> {
        while (ok < 1000 && std::any_of(calls.begin(), calls.end(), [](auto& f) {
                   return f.wait_for(0s) != std::future_status::ready;
               }))
            co_await sleep_for(1ms);
    }());
    auto after = c.stats();
    auto writes = after.writes - before.writes;
    auto commands = after.commands_written - before.commands_written;
    MESSAGE("1000 execs: " << commands << " commands in " << writes << " writes");
    CHECK(ok == 1000);
    CHECK(commands == 1000);
    CHECK(writes <= 20);
    CHECK(server.cli("GET counter") == "1000");
}

TEST_CASE("scripts are loaded on connect and NOSCRIPT is recovered transparently") {
    redis_server server;
    net::io_context ioc;
    connection c(ioc.get_executor(), settings_for(server), {incr_script});
    c.start();
    run(ioc, [&]() -> net::awaitable<void> {
        REQUIRE(co_await wait_connected(c));
        auto r = co_await c.eval(0, strings("n"), strings("5"));
        CHECK(r.value.integer == 5);
        CHECK(c.stats().noscript_retries == 0);
        CHECK(server.cli("SCRIPT FLUSH") == "OK");
        auto again = co_await c.eval(0, strings("n"), strings("2"));
        CHECK_FALSE(again.ec);
        CHECK(again.value.integer == 7);
        CHECK(c.stats().noscript_retries == 1);
        auto third = co_await c.eval(0, strings("n"), strings("1"));  // EVAL cached it again
        CHECK(third.value.integer == 8);
        CHECK(c.stats().noscript_retries == 1);
    }());
}

TEST_CASE(
    "redis-server killed mid-stream: pending calls fail, no hang, calls succeed after restart") {
    redis_server server;
    net::io_context ioc;
    auto cs = settings_for(server);
    cs.backoff_max = 200ms;
    connection c(ioc.get_executor(), cs, {incr_script});
    c.start();
    run(ioc, wait_connected(c));
    int done = 0, failed = 0, succeeded = 0;
    bool killed = false;
    for (int i = 0; i < 300; ++i)
        net::co_spawn(
            ioc,
            [&]() -> net::awaitable<void> {
                // Keep calling until the kill makes a call fail: the kill lands mid-stream.
                for (;;) {
                    auto r = co_await c.eval(0, strings("k"), strings("1"));
                    if (r.ec) {
                        ++failed;
                        break;
                    }
                    ++succeeded;
                    if (succeeded > 5'000'000) break;
                }
                ++done;
            },
            net::detached);
    run(ioc, sleep_for(100ms));
    server.kill();
    killed = true;
    run(ioc, [&]() -> net::awaitable<void> {
        while (done < 300)
            co_await sleep_for(5ms);
        while (c.state() != connection::health::down)
            co_await sleep_for(5ms);
    }());
    MESSAGE("before the kill " << succeeded << " calls succeeded; " << failed << " failed with it");
    CHECK(killed);
    CHECK(succeeded > 0);
    CHECK(failed == 300);
    auto down = run(ioc, c.exec(command("PING")));
    CHECK(down.ec == client_error::not_connected);
    server.restart();
    run(ioc, [&]() -> net::awaitable<void> {
        REQUIRE(co_await wait_connected(c));
        auto r = co_await c.eval(0, strings("fresh"),
                                 strings("3"));  // scripts reloaded on the new connection
        CHECK_FALSE(r.ec);
        CHECK(r.value.integer == 3);
    }());
    CHECK(c.stats().reconnects >= 1);
}

TEST_CASE("DEBUG SLEEP trips command_timeout, then the watchdog drops and reconnects") {
    redis_server server({"--enable-debug-command", "yes"});
    net::io_context ioc;
    auto cs = settings_for(server);
    cs.command_timeout = 50ms;
    cs.watchdog = 300ms;
    cs.backoff_max = 100ms;
    connection sleeper_conn(ioc.get_executor(), settings_for(server));
    connection c(ioc.get_executor(), cs);
    c.start();
    sleeper_conn.start();
    run(ioc, [&]() -> net::awaitable<void> {
        REQUIRE(co_await wait_connected(c));
        REQUIRE(co_await wait_connected(sleeper_conn));
        // The server is single-threaded: DEBUG SLEEP on one connection stalls every other one.
        net::co_spawn(co_await net::this_coro::executor,
                      sleeper_conn.exec(command("DEBUG", "SLEEP", "1")), net::detached);
        co_await sleep_for(20ms);
        auto start = std::chrono::steady_clock::now();
        auto r = co_await c.exec(command("PING"));
        auto took = std::chrono::steady_clock::now() - start;
        CHECK(r.ec == client_error::timeout);
        CHECK(took < 300ms);
        CHECK(c.state() == connection::health::degraded);
        // The PING stays unanswered in the FIFO: past the watchdog limit the connection drops.
        co_await sleep_for(450ms);
        CHECK(c.state() == connection::health::down);
        CHECK(c.last_error().find("watchdog") != std::string::npos);
        REQUIRE(co_await wait_connected(c));
        auto ok = co_await c.exec(command("PING"));
        CHECK_FALSE(ok.ec);
        CHECK(ok.value.str == "PONG");
    }());
}

TEST_CASE("pending commands are capped: beyond the cap calls fail at once") {
    redis_server server({"--enable-debug-command", "yes"});
    net::io_context ioc;
    auto cs = settings_for(server);
    cs.max_pending = 10;
    connection c(ioc.get_executor(), cs);
    c.start();
    run(ioc, wait_connected(c));
    int capped = 0, finished = 0;
    auto one = [&](std::string cmd) -> net::awaitable<void> {
        auto r = co_await c.exec(std::move(cmd));
        if (r.ec == client_error::too_many_pending) ++capped;
        ++finished;
    };
    net::co_spawn(ioc, one(command("DEBUG", "SLEEP", "0.3")), net::detached);
    for (int i = 0; i < 30; ++i)
        net::co_spawn(ioc, one(command("PING")), net::detached);
    run(ioc, [&]() -> net::awaitable<void> {
        while (finished < 31)
            co_await sleep_for(5ms);
    }());
    CHECK(capped == 21);
}

TEST_CASE("AUTH and SELECT from the settings; a wrong password is a clear error") {
    redis_server server({"--requirepass", "s3cret"});
    net::io_context ioc;
    auto good = settings_for(server);
    good.password = "s3cret";
    good.db = 3;
    connection c(ioc.get_executor(), good);
    c.start();
    run(ioc, [&]() -> net::awaitable<void> {
        REQUIRE(co_await wait_connected(c));
        auto r = co_await c.exec(command("SET", "in-db-3", "yes"));
        CHECK(r.value.str == "OK");
    }());
    CHECK(server.cli("-n 3 GET in-db-3") == "yes");
    CHECK(server.cli("-n 0 EXISTS in-db-3") == "0");

    auto bad = settings_for(server);
    bad.password = "wrong";
    connection b(ioc.get_executor(), bad);
    b.start();
    run(ioc, sleep_for(300ms));
    CHECK(b.state() == connection::health::down);
    MESSAGE("wrong password: " << b.last_error());
    CHECK(b.last_error().find("AUTH refused by Redis") != std::string::npos);
    CHECK(b.last_error().find("WRONGPASS") != std::string::npos);
    auto r = run(ioc, b.exec(command("PING")));
    CHECK(r.ec == client_error::not_connected);
}

TEST_CASE("stop fails pending calls and ends the connection") {
    redis_server server;
    net::io_context ioc;
    auto c = std::make_unique<connection>(ioc.get_executor(), settings_for(server));
    c->start();
    run(ioc, wait_connected(*c));
    c->stop();
    auto r = run(ioc, c->exec(command("PING")));
    CHECK(r.ec == client_error::stopped);
    c.reset();
    ioc.run_for(100ms);  // the run loop finishes on its own, holding its state alive
}
