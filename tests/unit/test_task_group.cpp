// The task group that owns an event loop's coroutines (gateway/runtime/task_group.hpp):
// spawn, cancel, await — on one io_context, no sockets, each run capped in wall-clock time.
#include <doctest/doctest.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <stdexcept>

#include "gateway/runtime/task_group.hpp"

using namespace std::chrono_literals;
namespace net = boost::asio;
using rategate::gateway::task_group;

namespace {

constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);
using clock_type = std::chrono::steady_clock;

// Waits `d` on a timer; counts how it ended.
net::awaitable<void> sleeper(std::chrono::milliseconds d, int& finished, int& aborted) {
    net::steady_timer t(co_await net::this_coro::executor, d);
    auto [ec] = co_await t.async_wait(use_nothrow);
    ++(ec ? aborted : finished);
}

// Filters every cancellation out, then sleeps `d`: runs to its end whatever is emitted.
net::awaitable<void> ignores_cancellation(std::chrono::milliseconds d, int& finished,
                                          int& aborted) {
    co_await net::this_coro::reset_cancellation_state(
        [](net::cancellation_type) { return net::cancellation_type::none; });
    co_await sleeper(d, finished, aborted);
}

// Waits idle (as a session between requests does): `partial` ends the wait.
net::awaitable<void> idle_sleeper(int& finished, int& aborted) {
    co_await rategate::gateway::idle_cancellation();
    co_await sleeper(std::chrono::hours(1), finished, aborted);
}

net::awaitable<void> thrower() {
    co_await net::this_coro::executor;
    throw std::runtime_error("expected by the test");
}

net::awaitable<void> await_group(task_group& g, bool& returned) {
    co_await g.wait();
    returned = true;
}

// Runs `ioc` until it has no work left, at most 5 s (a bug must not hang the suite).
void run_capped(net::io_context& ioc) {
    auto started = clock_type::now();
    ioc.run_for(5s);
    REQUIRE(clock_type::now() - started < 5s);
}

}  // namespace

TEST_CASE("task group: N tasks spawned, cancelled with terminal, awaited") {
    net::io_context ioc;
    task_group g(ioc.get_executor(), "test");
    int finished = 0, aborted = 0;
    bool awaited = false;
    for (int i = 0; i < 50; ++i)
        g.spawn(sleeper(std::chrono::hours(1), finished, aborted));
    CHECK(g.size() == 50);
    net::co_spawn(
        ioc,
        [&]() -> net::awaitable<void> {
            g.emit(net::cancellation_type::terminal);
            co_await g.wait();
            awaited = true;
        },
        net::detached);
    run_capped(ioc);
    CHECK(awaited);
    CHECK(aborted == 50);
    CHECK(finished == 0);
    CHECK(g.size() == 0);
}

TEST_CASE("task group: wait() with no task completes at once; tasks that end alone are awaited") {
    net::io_context ioc;
    task_group g(ioc.get_executor(), "test");
    int finished = 0, aborted = 0, awaited = 0;
    net::co_spawn(
        ioc,
        [&]() -> net::awaitable<void> {
            co_await g.wait();
            ++awaited;
            for (int i = 1; i <= 3; ++i)
                g.spawn(sleeper(std::chrono::milliseconds(10 * i), finished, aborted));
            co_await g.wait();
            ++awaited;
        },
        net::detached);
    run_capped(ioc);
    CHECK(awaited == 2);
    CHECK(finished == 3);
    CHECK(aborted == 0);
}

TEST_CASE("task group: a task that ignores cancellation until it finishes is awaited to its end") {
    net::io_context ioc;
    task_group g(ioc.get_executor(), "test");
    int finished = 0, aborted = 0;
    g.spawn(ignores_cancellation(100ms, finished, aborted));
    g.spawn(sleeper(std::chrono::hours(1), finished, aborted));
    clock_type::duration took{};
    net::co_spawn(
        ioc,
        [&]() -> net::awaitable<void> {
            auto started = clock_type::now();
            g.emit(net::cancellation_type::terminal);
            co_await g.wait();
            took = clock_type::now() - started;
        },
        net::detached);
    run_capped(ioc);
    CHECK(finished == 1);
    CHECK(aborted == 1);
    CHECK(took >= 100ms);
}

TEST_CASE("task group: partial closes idle tasks only; busy ones finish, then terminal") {
    net::io_context ioc;
    task_group g(ioc.get_executor(), "test");
    int idle_finished = 0, idle_aborted = 0, busy_finished = 0, busy_aborted = 0;
    for (int i = 0; i < 3; ++i) {
        g.spawn(idle_sleeper(idle_finished, idle_aborted));
        g.spawn(sleeper(50ms, busy_finished, busy_aborted));  // busy: Asio's default filter
    }
    bool awaited = false;
    net::co_spawn(
        ioc,
        [&]() -> net::awaitable<void> {
            g.emit(net::cancellation_type::partial);
            co_await g.wait();
            awaited = true;
        },
        net::detached);
    run_capped(ioc);
    CHECK(awaited);
    CHECK(idle_aborted == 3);
    CHECK(busy_finished == 3);
    CHECK(busy_aborted == 0);
}

TEST_CASE("task group: a task's exception ends only that task") {
    net::io_context ioc;
    task_group g(ioc.get_executor(), "test");
    int finished = 0, aborted = 0;
    g.spawn(thrower());
    g.spawn(sleeper(20ms, finished, aborted));
    bool awaited = false;
    net::co_spawn(
        ioc,
        [&]() -> net::awaitable<void> {
            co_await g.wait();
            awaited = true;
        },
        net::detached);
    run_capped(ioc);
    CHECK(awaited);
    CHECK(finished == 1);
    CHECK(g.size() == 0);
}

TEST_CASE("task group: a waiter cancelled itself returns while tasks still run") {
    net::io_context ioc;
    task_group g(ioc.get_executor(), "test");
    int finished = 0, aborted = 0;
    g.spawn(sleeper(std::chrono::hours(1), finished, aborted));
    task_group waiters(ioc.get_executor(), "waiters");
    bool returned = false;
    waiters.spawn(await_group(g, returned));
    net::steady_timer later(ioc, 20ms);
    later.async_wait([&](auto) {
        waiters.emit(net::cancellation_type::terminal);  // the waiter returns, the task runs on
        g.emit(net::cancellation_type::terminal);
    });
    run_capped(ioc);
    CHECK(returned);
    CHECK(aborted == 1);
}

TEST_CASE("task group: tasks discarded by their io_context leave the group consistent") {
    // As a worker's tear-down: the loop destroys what is pending, the group is destroyed next,
    // the loop last.
    struct discarding_context : net::io_context {
        void discard_pending() { shutdown(); }
    } ioc;
    int finished = 0, aborted = 0;
    task_group g(ioc.get_executor(), "test");
    g.spawn(sleeper(std::chrono::hours(1), finished, aborted));
    g.spawn(sleeper(std::chrono::hours(1), finished, aborted));
    ioc.run_for(10ms);
    CHECK(g.size() == 2);
    ioc.discard_pending();  // destroys the suspended coroutines and their completion handlers
    CHECK(g.size() == 0);
    CHECK(finished + aborted == 0);
}
