// The coroutines of one event loop, owned so that its stop path can cancel them and await them.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/this_coro.hpp>
#include <cstddef>
#include <memory>
#include <string>

namespace rategate::gateway {

/// A task group: every coroutine spawned into it gets its own cancellation signal (bound to
/// its co_spawn as its cancellation slot), emit() signals all the live ones, and wait()
/// completes when the last of them has completed (at once when none is live) — no polling:
/// the last task to complete wakes the waiters.
///
/// What a cancellation type means is the task's own choice, through its cancellation filter
/// (Asio's default lets only `terminal` through to the operation a task waits on): the gateway
/// emits `partial` to ask "stop when you are idle" and `terminal` for "stop now". A task that
/// filters a cancellation out runs to its end unchanged.
///
/// A task that ends with an exception is logged under the group's name, unless the exception
/// is Asio's operation_aborted (a terminal cancellation thrown at the task's next co_await:
/// the ordinary way a cancelled coroutine unwinds).
///
/// Single-threaded: spawn, emit and wait run on the executor's one thread (an event loop's).
/// The group must outlive its tasks, and its io_context the group; a task destroyed without
/// completing (its io_context discarded pending work) leaves the group without waking waiters.
class task_group {
  public:
    task_group(boost::asio::any_io_executor ex, std::string name);
    ~task_group();
    task_group(const task_group&) = delete;
    task_group& operator=(const task_group&) = delete;

    /// Starts `task` on the executor as a member of the group.
    void spawn(boost::asio::awaitable<void> task);
    /// Emits `type` on every live task's cancellation signal.
    void emit(boost::asio::cancellation_type type);
    /// Completes when no task is live. Returns early if the waiting coroutine is cancelled.
    boost::asio::awaitable<void> wait();
    /// Tasks live now.
    std::size_t size() const;

  private:
    struct state;
    class done;
    std::unique_ptr<state> state_;
};

/// For a task that takes `partial` cancellation as "stop if idle" (a client session): while it
/// waits idle, `co_await idle_cancellation()` lets any cancellation through to the wait, as
/// `terminal` (which every Asio operation, TLS included, honours); once it is busy again,
/// `co_await busy_cancellation()` lets through only `terminal`, and forgets a `partial` seen
/// while idle. Neither suspends, so no cancellation can slip between the check of a stop flag
/// and the wait that follows it.
inline auto idle_cancellation() {
    return boost::asio::this_coro::reset_cancellation_state(
        boost::asio::enable_partial_cancellation(),
        [](boost::asio::cancellation_type) { return boost::asio::cancellation_type::terminal; });
}
inline auto busy_cancellation() {
    return boost::asio::this_coro::reset_cancellation_state();
}

}  // namespace rategate::gateway
