#include "limiters/redis/connection.hpp"

#include "limiters/redis/connection_state.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <optional>

namespace rategate::limiters::redis {

namespace net = boost::asio;
using clock = std::chrono::steady_clock;

namespace {

// The reply slot of one exec(), shared by the multiplexer (which completes it: reply, timeout,
// connection loss, stop) and the waiting coroutine. The slot owns the waiter's handler until it
// is completed; completing it posts the handler, so the waiter resumes on a fresh stack.
struct call_slot final : reply_slot {
    explicit call_slot(net::any_io_executor e) : ex(std::move(e)) {}
    void notify() override {
        if (cancel.is_connected()) cancel.clear();
        if (!handler) return;
        auto h = std::move(*handler);  // move-construct only: Boost 1.81's move-assign recurses
        handler.reset();
        net::post(ex, [h = std::move(h)]() mutable { std::move(h)(); });
    }
    net::any_io_executor ex;
    std::optional<net::any_completion_handler<void()>> handler;
    net::cancellation_slot cancel;  ///< the waiter's, while it may still cancel
};
}  // namespace

// New commands to write. On an idle connection (the writer asleep, nothing in flight) they
// are written here, on the caller's stack (a non-blocking send): waking the writer first
// would put a trip through the event loop's queue, behind every handler already in it,
// between a call and its bytes. Otherwise the writer takes them, so that the commands of
// one event-loop turn go out together (pipelining). What the socket does not take of a
// direct write (or an error) is left to the writer.
void connection::impl::wake_writer() {
    if (writer_parked && carry.empty() && state == phase::ready && mux.in_flight() == 0 &&
        mux.has_waiting()) {
        boost::system::error_code ec;
        if (!socket.non_blocking()) socket.non_blocking(true, ec);
        if (!ec) {
            auto out = mux.prepare_write();
            std::size_t n = socket.write_some(net::buffer(out), ec);
            if (!ec && n == out.size()) {
                last_write = clock::now();
                mux.commit_write(last_write);
                return;
            }
            carry.assign(out.substr(ec ? 0 : n));
        }
    }
    wake.cancel();
}

namespace {

result fail(connection::impl& c, client_error e) {
    ++c.stats.errors;
    return result{make_error_code(e), {}};
}

// Parks the waiter's handler in its slot. A cancellation of the waiter abandons the request (a
// written one keeps its FIFO place) and completes the slot with operation_canceled.
template <class Handler>
void wait_for(connection::impl& c, const std::shared_ptr<call_slot>& slot, multiplexer::handle id,
              Handler handler) {
    auto cs = net::get_associated_cancellation_slot(handler);
    slot->handler.emplace(std::move(handler));
    if (slot->done()) {  // completed already: resume at once (through the executor)
        slot->notify();
        return;
    }
    if (!cs.is_connected()) return;
    slot->cancel = cs;
    cs.assign(
        [w = c.weak_from_this(), s = std::weak_ptr<call_slot>(slot), id](net::cancellation_type) {
            auto self = w.lock();
            auto slot = s.lock();
            if (!self || !slot || slot->done()) return;
            slot->cancel = net::cancellation_slot();  // running inside it: never clear() it here
            self->mux.abandon(id);
            slot->on_reply(std::make_error_code(std::errc::operation_canceled), reply{});
        });
}

// One call: queued in the multiplexer, written (directly when the connection is idle), and
// awaited in its slot.
net::awaitable<result> exec(connection::impl& c, std::string encoded, std::size_t replies) {
    using phase = connection::phase;
    auto self = c.shared_from_this();
    ++c.stats.commands;
    if (c.state == phase::draining || c.state == phase::closed)
        co_return fail(c, client_error::stopped);
    if (c.state != phase::ready) co_return fail(c, client_error::not_connected);
    if (c.mux.pending() >= c.settings.max_pending)
        co_return fail(c, client_error::too_many_pending);
    auto slot = std::make_shared<call_slot>(c.executor);
    auto id =
        c.mux.push(std::move(encoded), slot, replies, clock::now() + c.settings.command_timeout);
    c.wake_writer();
    co_await net::async_initiate<const net::use_awaitable_t<>&, void()>(
        [&c, &slot, id](auto handler) { wait_for(c, slot, id, std::move(handler)); },
        net::use_awaitable);
    std::error_code ec = slot->error();
    reply value = std::move(slot->value());
    if (!ec && value.is_unavailable_error()) {
        ec = make_error_code(client_error::server_unavailable);
        ++c.stats.unavailable;
    }
    if (ec == client_error::timeout) {
        ++c.stats.timeouts;
        c.last_trouble = clock::now();
    }
    if (ec) ++c.stats.errors;
    co_return result{ec, std::move(value)};
}

}  // namespace

connection::connection(net::any_io_executor ex, connection_settings settings,
                       std::vector<script> scripts)
    : impl_(std::make_shared<impl>(std::move(ex), std::move(settings), std::move(scripts))) {}

connection::~connection() {
    close();
}

void connection::start() {
    if (impl_->state != phase::idle) return;
    impl_->enter(phase::connecting);
    net::co_spawn(impl_->executor, impl_->run(), net::detached);
    if (impl_->sentinels && !impl_->settings.sentinel->nodes.empty())
        net::co_spawn(impl_->executor, impl_->watch_sentinels(), net::detached);
}

void connection::stop() {
    impl_->begin_drain();
}

void connection::close() {
    impl_->close_now();
}

net::awaitable<result> connection::exec(std::string encoded) {
    auto i = impl_;
    co_return co_await redis::exec(*i, std::move(encoded), 1);
}

net::awaitable<result> connection::exec(std::string encoded, std::size_t replies) {
    auto i = impl_;
    co_return co_await redis::exec(*i, std::move(encoded), replies);
}

net::awaitable<result> connection::eval(std::size_t index,
                                        const std::vector<std::string_view>& keys,
                                        const std::vector<std::string_view>& args, bool asking) {
    auto i = impl_;
    std::string numkeys = std::to_string(keys.size());
    std::vector<std::string_view> argv;
    argv.reserve(3 + keys.size() + args.size());
    argv.push_back("EVALSHA");
    argv.push_back(i->shas[index]);
    argv.push_back(numkeys);
    argv.insert(argv.end(), keys.begin(), keys.end());
    argv.insert(argv.end(), args.begin(), args.end());
    auto encode = [&] {
        std::string out = asking ? command("ASKING") : std::string();
        out += encode_command(argv);
        return out;
    };
    std::size_t replies = asking ? 2 : 1;
    auto r = co_await redis::exec(*i, encode(), replies);
    if (!r.ec && r.value.is_error("NOSCRIPT")) {
        // Redis lost its script cache (restart, failover, SCRIPT FLUSH): EVAL caches it again.
        ++i->stats.noscript_retries;
        argv[0] = "EVAL";
        argv[1] = i->scripts[index].source;
        r = co_await redis::exec(*i, encode(), replies);
    }
    co_return r;
}

net::awaitable<bool> connection::wait_up(std::chrono::steady_clock::time_point deadline) {
    auto i = impl_;
    co_return co_await i->wait_up(deadline);
}

net::awaitable<bool> connection::wait_change(std::chrono::steady_clock::time_point deadline) {
    auto i = impl_;
    co_return co_await i->wait_change(deadline);
}

void connection::on_change(std::function<void()> hook) {
    impl_->change_hook = std::move(hook);
}

connection::health connection::state() const {
    if (impl_->state != phase::ready && impl_->state != phase::draining) return health::down;
    if (clock::now() - impl_->last_trouble < std::chrono::seconds(1)) return health::degraded;
    return health::connected;
}

connection::phase connection::current_phase() const {
    return impl_->state;
}

std::string connection::last_error() const {
    return impl_->last_error;
}

std::string connection::address() const {
    return impl_->where();
}

std::uint64_t connection::generation() const {
    return impl_->stats.reconnects + (impl_->ever_connected ? 1 : 0);
}

connection::counters connection::stats() const {
    auto c = impl_->stats;
    c.writes = impl_->mux.writes();
    c.commands_written = impl_->mux.commands_written();
    return c;
}

}  // namespace rategate::limiters::redis
