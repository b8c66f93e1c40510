#include "gateway/runtime/task_group.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <list>
#include <utility>

namespace rategate::gateway {

namespace net = boost::asio;

struct task_group::state {
    state(net::any_io_executor e, std::string n)
        : ex(std::move(e)), idle(ex, net::steady_timer::time_point::max()), name(std::move(n)) {}
    net::any_io_executor ex;
    std::list<net::cancellation_signal> live;  ///< one signal per live task
    net::steady_timer idle;                    ///< never expires: cancelled to wake wait()
    std::string name;
};

// A task's completion handler. Its signal is erased in a handler posted after the completion,
// never inline: the signal holds co_spawn's own cancellation handler until the spawned thread
// has finished, and emit() may be iterating over the signals when a task completes.
class task_group::done {
  public:
    done(state* s, std::list<net::cancellation_signal>::iterator it) : s_(s), it_(it) {}
    done(done&& o) noexcept : s_(std::exchange(o.s_, nullptr)), it_(o.it_) {}
    done& operator=(done&&) = delete;
    // Destroyed without being called: the loop discarded the task (tear-down).
    ~done() {
        if (s_) s_->live.erase(it_);
    }

    void operator()(std::exception_ptr e) {
        auto* s = std::exchange(s_, nullptr);
        net::post(s->ex, [s, it = it_] {
            s->live.erase(it);
            if (s->live.empty()) s->idle.cancel();
        });
        if (!e) return;
        try {
            std::rethrow_exception(e);
        } catch (const boost::system::system_error& ex) {
            if (ex.code() != net::error::operation_aborted)
                spdlog::error("{} ended by exception: {}", s->name, ex.what());
        } catch (const std::exception& ex) {
            spdlog::error("{} ended by exception: {}", s->name, ex.what());
        }
    }

  private:
    state* s_;
    std::list<net::cancellation_signal>::iterator it_;
};

task_group::task_group(net::any_io_executor ex, std::string name)
    : state_(std::make_unique<state>(std::move(ex), std::move(name))) {}

task_group::~task_group() = default;

void task_group::spawn(net::awaitable<void> task) {
    auto it = state_->live.emplace(state_->live.end());
    net::co_spawn(state_->ex, std::move(task),
                  net::bind_cancellation_slot(it->slot(), done(state_.get(), it)));
}

void task_group::emit(net::cancellation_type type) {
    for (auto& signal : state_->live)
        signal.emit(type);
}

net::awaitable<void> task_group::wait() {
    while (!state_->live.empty()) {
        co_await state_->idle.async_wait(net::as_tuple(net::use_awaitable));
        auto cs = co_await net::this_coro::cancellation_state;
        if (cs.cancelled() != net::cancellation_type::none) co_return;
    }
}

std::size_t task_group::size() const {
    return state_->live.size();
}

}  // namespace rategate::gateway
