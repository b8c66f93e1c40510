#include "gateway/runtime/deadline.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <ctime>

namespace rategate::gateway {

namespace net = boost::asio;

std::chrono::steady_clock::time_point coarse_now() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

deadline::deadline(deadline_sweeper& sweeper, net::ip::tcp::socket& socket)
    : sweeper_(sweeper),
      slot_(sweeper.slots_.insert(sweeper.slots_.end(),
                                  slot{&socket, clock::time_point::max(), false})) {}

deadline::~deadline() {
    sweeper_.slots_.erase(slot_);
}

void deadline::expires_after(std::chrono::milliseconds d) {
    slot_->at = coarse_now() + d;  // one tick early at most: the sweep is 100 ms
    slot_->expired = false;
}

void deadline::expires_at(clock::time_point at) {
    slot_->at = at;
    slot_->expired = false;
}

void deadline::expires_never() {
    slot_->at = clock::time_point::max();
    slot_->expired = false;
}

bool deadline::expired() const {
    return slot_->expired;
}

net::awaitable<void> deadline_sweeper::run() {
    net::steady_timer timer(co_await net::this_coro::executor);
    for (;;) {
        timer.expires_after(resolution_);
        auto [ec] = co_await timer.async_wait(net::as_tuple(net::use_awaitable));
        if (ec) co_return;  // cancelled
        auto now = deadline::clock::now();
        for (auto& s : slots_) {
            // Cancelled again on every sweep while expired, in case no operation was pending.
            if (s.at <= now) {
                s.expired = true;
                boost::system::error_code ignored;
                s.socket->cancel(
                    ignored);  // the pending operation completes with operation_aborted
            }
        }
    }
}

}  // namespace rategate::gateway
