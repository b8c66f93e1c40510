// The Redis client against a real redis-server started on a free port by each test.
#include <doctest/doctest.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <thread>

#include "limiters/redis/connection.hpp"
#include "tests/support/redis_server.hpp"

namespace net = boost::asio;
using namespace rategate::limiters::redis;
using namespace std::chrono_literals;
using rategate::test::fault_proxy;
using rategate::test::redis_server;
using namespace boost::asio::experimental::awaitable_operators;

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
        if (ioc.stopped()) ioc.restart();  // it ran out of work once (a closed connection)
        ioc.run_one_for(10ms);
    }
    return fut.get();
}

net::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    net::steady_timer t(co_await net::this_coro::executor, d);
    co_await t.async_wait(net::use_awaitable);
}

// Waits until the connection is up (or `cap` passes), on its readiness signal.
net::awaitable<bool> wait_connected(connection& c, std::chrono::milliseconds cap = 5000ms) {
    co_return co_await c.wait_up(std::chrono::steady_clock::now() + cap);
}

connection_settings settings_for(const redis_server& s) {
    connection_settings cs;
    cs.port = s.port();
    cs.command_timeout = 2000ms;
    cs.watchdog = 5000ms;
    return cs;
}

const script incr_script{"incr_by", "return redis.call('INCRBY', KEYS[1], ARGV[1])"};

// Settings for the fault tests: quick reconnects, so a storm of callers spans many attempts.
connection_settings fault_settings(unsigned short port) {
    connection_settings cs;
    cs.port = port;
    cs.connect_timeout = 200ms;
    cs.command_timeout = 2000ms;
    cs.watchdog = 4000ms;
    cs.backoff_min = 2ms;
    cs.backoff_max = 20ms;
    return cs;
}

// How the calls of a storm ended.
struct storm_result {
    int calls = 0, ok = 0, failed = 0;
    std::map<std::string, int> by_error;  ///< failed calls by error message
    bool each_caller_once = true;         ///< every caller finished exactly once
};

// `callers` coroutines on `c`, started ten at a time `spread` apart; each makes up to
// `calls_each` calls, stopping at its first error when `until_error`. `during` (optional) runs
// 100 ms in, while the calls are in flight. Returns once every caller has finished, under the
// wall-clock cap: a call that never completed would trip the cap, one completed twice would
// resume its coroutine twice (a sanitizer finding) or skew the counts.
storm_result storm(net::io_context& ioc, connection& c, int callers,
                   std::chrono::milliseconds spread, int calls_each, bool until_error,
                   std::function<void()> during = {}) {
    storm_result out;
    std::vector<int> finished(static_cast<std::size_t>(callers), 0);
    int done = 0;
    auto caller = [&](int i) -> net::awaitable<void> {
        for (int k = 0; k < calls_each; ++k) {
            auto r = co_await c.eval(0, strings("storm"), strings("1"));
            ++out.calls;
            if (r.ec) {
                ++out.failed;
                ++out.by_error[r.ec.message()];
                if (until_error) break;
            } else {
                ++out.ok;
            }
        }
        ++finished[static_cast<std::size_t>(i)];
        ++done;
    };
    run(ioc, [&]() -> net::awaitable<void> {
        auto ex = co_await net::this_coro::executor;
        for (int i = 0; i < callers; ++i) {
            net::co_spawn(ex, caller(i), net::detached);
            if (spread.count() > 0 && i % 10 == 9) co_await sleep_for(spread);
        }
        if (during) {
            co_await sleep_for(100ms);
            during();
        }
        while (done < callers)
            co_await sleep_for(2ms);
    }());
    for (int f : finished)
        if (f != 1) out.each_caller_once = false;
    return out;
}

std::string describe(const storm_result& r) {
    std::string s = std::to_string(r.calls) + " calls, " + std::to_string(r.ok) + " ok";
    for (const auto& [what, n] : r.by_error)
        s += ", " + std::to_string(n) + " \"" + what + "\"";
    return s;
}

// After a fault has cleared: the connection comes back and a storm of calls all succeed.
void expect_recovery(net::io_context& ioc, connection& c) {
    REQUIRE(run(ioc, wait_connected(c, 10000ms)));
    auto up = storm(ioc, c, 100, 0ms, 5, false);
    INFO(describe(up));
    CHECK(up.each_caller_once);
    CHECK(up.ok == 500);
}

// Polls the loop until every future is ready.
template <class... Futures>
net::awaitable<void> until_ready(Futures&... f) {
    while (((f.wait_for(0s) != std::future_status::ready) || ...))
        co_await sleep_for(1ms);
}

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
        // A write is counted when its completion runs, which may come after the replies.
        for (int i = 0; i < 2000 && c.stats().commands_written - before.commands_written < 1000;
             ++i)
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

TEST_CASE("a call on an idle connection is written at once, not after a trip through the loop") {
    redis_server server;
    net::io_context ioc;
    connection c(ioc.get_executor(), settings_for(server));
    c.start();
    run(ioc, [&]() -> net::awaitable<void> {
        REQUIRE(co_await wait_connected(c));
        for (int i = 0; i < 3; ++i) {
            auto before = c.stats().writes;
            // Started from this coroutine, the call runs inline up to its first wait: its bytes
            // must be on the socket by then, with no other handler run in between.
            auto reply = net::co_spawn(ioc, c.exec(command("PING")), net::use_future);
            CHECK(c.stats().writes == before + 1);
            co_await until_ready(reply);
            CHECK(reply.get().value.str == "PONG");
        }
        // A second call while the first is unanswered waits for the writer (one write for
        // every command of a loop turn): both still get their replies.
        auto first = net::co_spawn(ioc, c.exec(command("PING")), net::use_future);
        auto second = net::co_spawn(ioc, c.exec(command("ECHO", "x")), net::use_future);
        co_await until_ready(first, second);
        CHECK(first.get().value.str == "PONG");
        CHECK(second.get().value.str == "x");
        // A call larger than the socket takes at once: the direct write sends what it can and
        // the writer the rest; then the connection is idle again and direct writes resume.
        std::string big(16 * 1024 * 1024, 'v');
        auto before = c.stats().writes;
        auto set = net::co_spawn(ioc, c.exec(command("SET", "big", big)), net::use_future);
        auto get = net::co_spawn(ioc, c.exec(command("STRLEN", "big")), net::use_future);
        co_await until_ready(set, get);
        CHECK(set.get().value.str == "OK");
        CHECK(get.get().value.integer == static_cast<long long>(big.size()));
        // The writer counts its writes (the rest of SET, then STRLEN) when they complete, which
        // may come after the replies; it sleeps again right after the last one.
        for (int i = 0; i < 2000 && c.stats().writes < before + 2; ++i)
            co_await sleep_for(1ms);
        CHECK(c.stats().writes == before + 2);
        auto idle = c.stats().writes;
        auto ping = net::co_spawn(ioc, c.exec(command("PING")), net::use_future);
        CHECK(c.stats().writes == idle + 1);
        co_await until_ready(ping);
        CHECK(ping.get().value.str == "PONG");
    }());
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
            co_await c.wait_change(std::chrono::steady_clock::now() + 10s);
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

TEST_CASE("refused: every caller fails at once with not_connected, then calls work") {
    auto port = rategate::test::free_port();
    net::io_context ioc;
    connection c(ioc.get_executor(), fault_settings(port), {incr_script});
    c.start();
    auto down = storm(ioc, c, 300, 5ms, 1, false);
    MESSAGE("refused: " << describe(down) << "; last error: " << c.last_error());
    CHECK(down.each_caller_once);
    CHECK(down.failed == 300);
    CHECK(down.by_error["not connected to Redis"] == 300);
    CHECK(c.last_error().find("cannot connect") != std::string::npos);
    redis_server server({}, port);
    expect_recovery(ioc, c);
}

TEST_CASE("wrong password: handshakes fail with WRONGPASS, callers fail, then calls work") {
    redis_server server({"--requirepass", "right"});
    net::io_context ioc;
    auto cs = fault_settings(server.port());
    cs.password = "wrong";
    connection c(ioc.get_executor(), cs, {incr_script});
    c.start();
    auto down = storm(ioc, c, 300, 5ms, 1, false);
    MESSAGE("wrong password: " << describe(down) << "; last error: " << c.last_error());
    CHECK(down.each_caller_once);
    CHECK(down.failed == 300);
    CHECK(c.state() == connection::health::down);
    CHECK(c.last_error().find("WRONGPASS") != std::string::npos);
    // The fault clears: the server now wants the password the client has.
    CHECK(server.cli("CONFIG SET requirepass wrong") == "OK");
    expect_recovery(ioc, c);
}

TEST_CASE("a server that fails the handshake: closes, resets, never answers, or hangs up") {
    struct fault {
        fault_proxy::mode mode;
        const char* name;
        const char* error;  ///< in last_error
    };
    const fault faults[] = {
        {fault_proxy::mode::close_at_first, "FIN after the first command", "during the handshake"},
        {fault_proxy::mode::reset_at_first, "RST after the first command", "during the handshake"},
        {fault_proxy::mode::silent, "no answer (handshake timeout)", "handshake timed out"},
        {fault_proxy::mode::refuse, "FIN before reading", "handshake"},
    };
    for (const auto& f : faults) {
        CAPTURE(f.name);
        redis_server server;
        fault_proxy proxy(server.port(), f.mode);
        net::io_context ioc;
        connection c(ioc.get_executor(), fault_settings(proxy.port()), {incr_script});
        c.start();
        // Long enough for several handshake attempts, even the 200 ms timeouts.
        auto down = storm(ioc, c, 300, 15ms, 1, false);
        run(ioc, [&]() -> net::awaitable<void> {
            while (proxy.accepted() < 2)
                co_await sleep_for(5ms);
        }());
        MESSAGE(f.name << ": " << describe(down) << "; " << proxy.accepted()
                       << " handshakes tried; last error: " << c.last_error());
        CHECK(down.each_caller_once);
        CHECK(down.failed == 300);
        CHECK(down.by_error["not connected to Redis"] == 300);
        CHECK(c.last_error().find(f.error) != std::string::npos);
        proxy.set_mode(fault_proxy::mode::pass);
        expect_recovery(ioc, c);
    }
}

TEST_CASE(
    "the server closing or resetting mid-pipeline: every caller fails once, then calls work") {
    for (bool reset : {false, true}) {
        CAPTURE(reset);
        redis_server server;
        fault_proxy proxy(server.port());
        net::io_context ioc;
        connection c(ioc.get_executor(), fault_settings(proxy.port()), {incr_script});
        c.start();
        REQUIRE(run(ioc, wait_connected(c)));
        // 300 callers call in a loop until the cut makes their call fail: it lands mid-stream.
        auto cut = storm(ioc, c, 300, 0ms, 1'000'000, true, [&] { proxy.cut(reset); });
        MESSAGE((reset ? "RST" : "FIN") << " mid-pipeline: " << describe(cut));
        CHECK(cut.each_caller_once);
        CHECK(cut.ok > 0);
        CHECK(cut.failed == 300);
        // In flight at the cut: connection_lost; called in the moment after it: not_connected.
        CHECK(cut.by_error["connection to Redis lost"] + cut.by_error["not connected to Redis"] ==
              300);
        CHECK(cut.by_error["connection to Redis lost"] > 0);
        expect_recovery(ioc, c);
        CHECK(c.stats().reconnects >= 1);
    }
}

TEST_CASE("READONLY fails the call and the ROLE re-check reconnects; a replica is refused") {
    redis_server server, other;
    net::io_context ioc;
    auto cs = fault_settings(server.port());
    connection c(ioc.get_executor(), cs, {incr_script});
    c.start();
    REQUIRE(run(ioc, wait_connected(c)));
    CHECK(server.cli("REPLICAOF 127.0.0.1 " + std::to_string(other.port())) == "OK");
    run(ioc, [&]() -> net::awaitable<void> {
        auto r = co_await c.eval(0, strings("k"), strings("1"));
        MESSAGE("write to a replica: " << r.ec.message() << " / " << r.value.str);
        CHECK(r.ec == client_error::server_unavailable);
        CHECK(r.value.is_unavailable_error());
        // The ROLE re-check sees a replica: the connection drops, and the handshake refuses it.
        auto until = std::chrono::steady_clock::now() + 5s;
        while (c.last_error().find("not a master") == std::string::npos &&
               std::chrono::steady_clock::now() < until)
            co_await sleep_for(5ms);
    }());
    CHECK(c.stats().rechecks >= 1);
    CHECK(c.state() == connection::health::down);
    CHECK(c.last_error().find("not a master") != std::string::npos);
    auto down = run(ioc, c.exec(command("PING")));
    CHECK(down.ec == client_error::not_connected);
    CHECK(server.cli("REPLICAOF NO ONE") == "OK");
    expect_recovery(ioc, c);
}

TEST_CASE("OOM fails the call as unavailable; ROLE says master, so the connection stays") {
    redis_server server;
    net::io_context ioc;
    connection c(ioc.get_executor(), fault_settings(server.port()), {incr_script});
    c.start();
    REQUIRE(run(ioc, wait_connected(c)));
    CHECK(server.cli("CONFIG SET maxmemory 1") == "OK");
    run(ioc, [&]() -> net::awaitable<void> {
        auto r = co_await c.eval(0, strings("k"), strings("1"));
        CHECK(r.ec == client_error::server_unavailable);
        CHECK(r.value.is_error("OOM"));
        co_await sleep_for(200ms);  // the re-check answers
    }());
    CHECK(c.stats().rechecks == 1);
    CHECK(c.stats().unavailable == 1);
    CHECK(c.state() == connection::health::degraded);  // not down: still a usable master
    CHECK(c.stats().reconnects == 0);
    CHECK(server.cli("CONFIG SET maxmemory 0") == "OK");
    auto ok = run(ioc, c.eval(0, strings("k"), strings("1")));
    CHECK_FALSE(ok.ec);
    CHECK(ok.value.integer == 1);
}

TEST_CASE("a cancelled call completes once, and the stream stays aligned") {
    redis_server server({"--enable-debug-command", "yes"});
    net::io_context ioc;
    connection c(ioc.get_executor(), settings_for(server));
    c.start();
    REQUIRE(run(ioc, wait_connected(c)));
    run(ioc, [&]() -> net::awaitable<void> {
        CHECK((co_await c.exec(command("SET", "k", "v"))).value.str == "OK");
        // The sleep is written, then its waiter gives up: its reply must be read and dropped.
        auto raced = co_await (c.exec(command("DEBUG", "SLEEP", "0.2")) || sleep_for(20ms));
        CHECK(raced.index() == 1);
        auto get = co_await c.exec(command("GET", "k"));
        CHECK_FALSE(get.ec);
        CHECK(get.value.str == "v");
        auto ping = co_await c.exec(command("PING"));
        CHECK(ping.value.str == "PONG");
    }());
    CHECK(c.stats().errors == 1);  // the cancelled one
}

TEST_CASE("close() completes every pending call at once with stopped") {
    redis_server server({"--enable-debug-command", "yes"});
    net::io_context ioc;
    connection c(ioc.get_executor(), settings_for(server));
    c.start();
    REQUIRE(run(ioc, wait_connected(c)));
    int stopped = 0, done = 0;
    auto one = [&](std::string cmd) -> net::awaitable<void> {
        auto r = co_await c.exec(std::move(cmd));
        if (r.ec == client_error::stopped) ++stopped;
        ++done;
    };
    net::co_spawn(ioc, one(command("DEBUG", "SLEEP", "0.5")), net::detached);
    for (int i = 0; i < 200; ++i)
        net::co_spawn(ioc, one(command("PING")), net::detached);
    auto took = std::chrono::steady_clock::now();
    run(ioc, [&]() -> net::awaitable<void> {
        co_await sleep_for(50ms);
        c.close();
        while (done < 201)
            co_await sleep_for(1ms);
    }());
    CHECK(std::chrono::steady_clock::now() - took < 400ms);
    CHECK(stopped == 201);
    CHECK(c.current_phase() == connection::phase::closed);
    CHECK(run(ioc, c.exec(command("PING"))).ec == client_error::stopped);
}

TEST_CASE("stop() drains: calls already sent get their replies, new ones fail, then closed") {
    redis_server server({"--enable-debug-command", "yes"});
    net::io_context ioc;
    connection c(ioc.get_executor(), settings_for(server));
    c.start();
    REQUIRE(run(ioc, wait_connected(c)));
    int ok = 0, done = 0;
    auto one = [&](std::string cmd) -> net::awaitable<void> {
        auto r = co_await c.exec(std::move(cmd));
        if (!r.ec) ++ok;
        ++done;
    };
    net::co_spawn(ioc, one(command("DEBUG", "SLEEP", "0.1")), net::detached);
    for (int i = 0; i < 100; ++i)
        net::co_spawn(ioc, one(command("PING")), net::detached);
    run(ioc, [&]() -> net::awaitable<void> {
        co_await sleep_for(20ms);
        c.stop();
        CHECK(c.current_phase() == connection::phase::draining);
        auto late = co_await c.exec(command("PING"));
        CHECK(late.ec == client_error::stopped);
        while (done < 101)
            co_await sleep_for(1ms);
        auto until = std::chrono::steady_clock::now() + 2s;
        while (c.current_phase() != connection::phase::closed &&
               std::chrono::steady_clock::now() < until)
            co_await c.wait_change(until);
    }());
    CHECK(ok == 101);
    CHECK(c.current_phase() == connection::phase::closed);
}

TEST_CASE("readiness is a notification: wait_up, wait_change and the change hook") {
    auto port = rategate::test::free_port();
    net::io_context ioc;
    connection c(ioc.get_executor(), fault_settings(port), {incr_script});
    std::vector<connection::phase> seen;
    int changes = 0;
    c.on_change([&] {
        ++changes;
        seen.push_back(c.current_phase());
    });
    c.start();
    using steady = std::chrono::steady_clock;
    run(ioc, [&]() -> net::awaitable<void> {
        // Nothing listens: a failed attempt is a change, though the phase stays connecting.
        CHECK(co_await c.wait_change(steady::now() + 5s));
        CHECK(c.current_phase() == connection::phase::connecting);
        CHECK_FALSE(c.last_error().empty());
        // wait_up waits through failed attempts, until its deadline.
        auto before = steady::now();
        CHECK_FALSE(co_await c.wait_up(before + 100ms));
        CHECK(steady::now() - before >= 100ms);
    }());
    redis_server server({}, port);
    run(ioc, [&]() -> net::awaitable<void> {
        CHECK(co_await c.wait_up(steady::now() + 10s));
        CHECK(c.current_phase() == connection::phase::ready);
        // Up already: at once.
        auto before = steady::now();
        CHECK(co_await c.wait_up(before + 10s));
        CHECK(steady::now() - before < 1s);
    }());
    REQUIRE(!seen.empty());
    CHECK(seen.front() == connection::phase::connecting);
    CHECK(seen.back() == connection::phase::ready);
    CHECK(std::count(seen.begin(), seen.end(), connection::phase::handshaking) >= 1);
    // A waiter is woken by close(), and wait_up then says no.
    int woke = 0;
    net::co_spawn(
        ioc,
        [&]() -> net::awaitable<void> {
            CHECK(co_await c.wait_change(steady::now() + 10s));
            CHECK_FALSE(co_await c.wait_up(steady::now() + 10s));
            ++woke;
        },
        net::detached);
    ioc.poll();
    auto before = changes;
    c.close();
    CHECK(changes == before + 1);
    CHECK(seen.back() == connection::phase::closed);
    run(ioc, [&]() -> net::awaitable<void> {
        while (woke == 0)
            co_await sleep_for(1ms);
    }());
    CHECK(woke == 1);
    c.on_change({});  // `seen` and `changes` go before `c`
}
