#include "limiters/redis/connection_state.hpp"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "limiters/redis/socket_ops.hpp"

namespace rategate::limiters::redis {

namespace net = boost::asio;
using clock = std::chrono::steady_clock;
using namespace net::experimental::awaitable_operators;

namespace {
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);
}  // namespace

connection::impl::impl(net::any_io_executor ex, connection_settings s, std::vector<script> sc)
    : executor(ex),
      settings(std::move(s)),
      scripts(std::move(sc)),
      socket(ex),
      wake(ex),
      retry(ex),
      changed(ex, clock::time_point::max()),
      shas(scripts.size()),
      target{settings.host, settings.port} {
    if (settings.sentinel)
        sentinels.emplace(ex, settings, state, [this](const endpoint& to) { follow_failover(to); });
}

// Ends the socket and completes every pending request (calls, handshake steps, probes)
// once, with `ec`. The parser starts fresh for the next connection.
void connection::impl::lose_connection(std::error_code ec) {
    boost::system::error_code ignored;
    socket.close(ignored);
    recheck.reset();
    mux.fail_all(ec);
}

// ready -> draining: calls already sent still get their replies; nothing new is accepted.
// Any other phase has no accepted call in flight: closed at once.
void connection::impl::begin_drain() {
    if (state == phase::ready) {
        enter(phase::draining);
        if (mux.pending() == 0)
            close_now();
        else
            wake_writer();
        return;
    }
    close_now();
}

// Any phase -> closed: every pending call completes now with `stopped`, and whatever the
// run loop waits on is cancelled, so it ends at its next step.
void connection::impl::close_now() {
    if (state == phase::closed) return;
    state = phase::closed;
    wake.cancel();
    retry.cancel();
    if (sentinels) sentinels->close();
    lose_connection(client_error::stopped);
    notify_change();
}

// +switch-master for our master: leave the old one now (pending calls fail with
// connection_lost), connect to whatever the sentinels name next.
void connection::impl::follow_failover(const endpoint& to) {
    if (state == phase::closed || state == phase::draining) return;
    last_error = "Sentinel: +switch-master from " + where() + " to " + to.host + ":" +
                 std::to_string(to.port);
    if (state == phase::ready || state == phase::handshaking) {
        boost::system::error_code ignored;
        socket.close(ignored);  // the run loop's reader/writer end and it reconnects
    } else {
        retry.cancel();  // waiting to reconnect: go now
    }
}

net::awaitable<void> connection::impl::run() {
    auto self = shared_from_this();
    auto backoff = settings.backoff_min;
    while (state != phase::closed && state != phase::draining) {
        enter(phase::connecting);
        auto ec = co_await connect();
        if (!ec && state == phase::connecting) {
            enter(phase::handshaking);
            ec = co_await handshake();
        }
        if (!ec && state == phase::handshaking) {
            if (ever_connected) ++stats.reconnects;
            ever_connected = true;
            last_error.clear();
            backoff = settings.backoff_min;
            last_write = clock::now();
            carry.clear();
            enter(phase::ready);
            co_await (reader() || writer() || watchdog());
            writer_parked = false;  // however the writer ended
            ec = make_error_code(client_error::connection_lost);
        }
        bool ending = state == phase::draining || state == phase::closed;
        if (!ending) {
            // Not ready from here on: calls fail with not_connected until the next connect.
            if (last_error.empty()) last_error = ec.message();
            if (state == phase::connecting)
                notify_change();  // a failed connect: no new phase, but news for waiters
            else
                enter(phase::connecting);
        }
        // Every request still pending ends here, exactly once: calls with connection_lost,
        // the steps of a failed handshake with its error.
        lose_connection(ending ? make_error_code(client_error::stopped) : ec);
        if (ending) break;
        // Capped exponential backoff with jitter (50-100% of the step), so that many
        // gateways do not reconnect in lockstep after a Redis restart.
        std::uniform_real_distribution<double> jitter(0.5, 1.0);
        auto delay = std::chrono::milliseconds(static_cast<long>(backoff.count() * jitter(rng)));
        backoff = std::min(settings.backoff_max, backoff * 2);
        retry.expires_after(delay);
        co_await retry.async_wait(use_nothrow);
    }
    lose_connection(client_error::stopped);
    enter(phase::closed);
}

// connecting: (Sentinel: ask for the master, then) resolve and connect within
// connect_timeout.
net::awaitable<std::error_code> connection::impl::connect() {
    if (sentinels)
        if (auto ec = co_await sentinels->discover(target, last_error)) co_return ec;
    if (state != phase::connecting) co_return make_error_code(client_error::stopped);
    connect_deadline = clock::now() + settings.connect_timeout;
    std::string why;
    // Named: g++ 12 mishandles non-trivial temporaries in a co_await expression.
    std::function<bool()> closed = [this] { return state == phase::closed; };
    auto ec = co_await open_socket(socket, target, connect_deadline, why, closed);
    if (ec) {
        last_error = why;
        co_return ec;
    }
    co_return std::error_code{};
}

// handshaking: the rounds of handshake.hpp, each written at once and judged step by step.
// The steps' slots are shared with the multiplexer, so when this fails half-way (timeout,
// closed socket) the run loop's fail_all completes them safely.
net::awaitable<std::error_code> connection::impl::handshake() {
    auto rounds = plan_handshake({settings.username, settings.password, settings.db}, scripts);
    std::vector<std::string> loaded(scripts.size());
    for (auto& round : rounds) {
        std::vector<std::shared_ptr<reply_slot>> slots;
        for (auto& step : round) {
            slots.push_back(std::make_shared<reply_slot>());
            mux.push(std::move(step.encoded), slots.back());
        }
        if (auto ec = co_await handshake_round(round, slots, loaded)) co_return ec;
    }
    shas = std::move(loaded);
    co_return std::error_code{};
}

// Writes one round, reads until its last step is answered, and judges every step; a step
// refused by Redis names itself in last_error. SCRIPT LOAD replies (SHA1s) go to `loaded`.
net::awaitable<std::error_code> connection::impl::handshake_round(
    const std::vector<handshake_step>& steps, std::vector<std::shared_ptr<reply_slot>>& slots,
    std::vector<std::string>& loaded) {
    auto [t, ec] = co_await round_trip(socket, mux, *slots.back(), connect_deadline, read_buffer);
    switch (t) {
        case trip::done:
            break;
        case trip::write_failed:
            last_error = "handshake write to Redis failed";
            co_return make_error_code(client_error::handshake_failed);
        case trip::timed_out:
            last_error = "Redis handshake timed out";
            co_return make_error_code(client_error::timeout);
        case trip::closed:
            last_error = "Redis closed the connection during the handshake: " + ec.message();
            co_return make_error_code(client_error::handshake_failed);
        case trip::garbled:
            last_error = "Redis protocol error during the handshake";
            co_return make_error_code(client_error::protocol_error);
    }
    mux.take_unavailable();  // judged below, step by step
    for (std::size_t i = 0; i < steps.size(); ++i) {
        auto v =
            judge(steps[i], slots[i]->error(), slots[i]->value(), where(), settings.require_master);
        if (!v.ok()) {
            last_error = std::move(v.why);
            co_return make_error_code(client_error::handshake_failed);
        }
        if (steps[i].what == handshake_step::kind::script_load)
            loaded[steps[i].script] = slots[i]->value().str;
    }
    co_return std::error_code{};
}

// ready: after a READONLY, LOADING, MASTERDOWN, CLUSTERDOWN, OOM or BUSY reply, one ROLE
// probe at a time asks whether this is still a master.
void connection::impl::start_recheck(const std::string& what) {
    last_trouble = clock::now();
    if (recheck || state != phase::ready) return;
    ++stats.rechecks;
    recheck = std::make_shared<reply_slot>();
    mux.push(command("ROLE"), recheck, 1, clock::now() + settings.command_timeout);
    wake_writer();
    last_error = "Redis answered " + what.substr(0, what.find(' ')) + ": re-checking its role";
}

// True when the finished probe says to reconnect (a replica now, or no answer in time).
bool connection::impl::recheck_says_reconnect() {
    if (!recheck || !recheck->done()) return false;
    auto probe = std::move(recheck);
    if (probe->error()) {
        last_error = "Redis did not answer the ROLE re-check: " + probe->error().message();
        return true;
    }
    if (auto why = role_problem(probe->value(), where(), settings.require_master); !why.empty()) {
        last_error = why + ": reconnecting";
        return true;
    }
    return false;
}

net::awaitable<void> connection::impl::reader() {
    for (;;) {
        auto [ec, n] = co_await socket.async_read_some(net::buffer(read_buffer), use_nothrow);
        if (ec) {
            // Cancelled by a sibling (watchdog, writer) or close(): keep their reason.
            if (ec != net::error::operation_aborted && state == phase::ready)
                last_error = "Redis connection closed: " + ec.message();
            co_return;
        }
        if (mux.consume(read_buffer.data(), n)) {
            last_error = "Redis protocol error: reconnecting with a fresh parser";
            co_return;
        }
        if (auto what = mux.take_unavailable(); !what.empty()) start_recheck(what);
        if (recheck_says_reconnect()) co_return;
        if (state == phase::draining && mux.pending() == 0) co_return;
    }
}

net::awaitable<void> connection::impl::writer() {
    for (;;) {
        while (!carry.empty() || mux.has_waiting()) {
            // The rest of a direct write first (its commands are staged already).
            auto out = carry.empty() ? mux.prepare_write() : std::string_view(carry);
            auto [ec, n] = co_await net::async_write(socket, net::buffer(out), use_nothrow);
            carry.clear();
            if (ec) {
                if (ec != net::error::operation_aborted && state == phase::ready)
                    last_error = "Redis write failed: " + ec.message();
                co_return;
            }
            last_write = clock::now();
            mux.commit_write(last_write);
        }
        wake.expires_at(clock::time_point::max());
        writer_parked = true;
        co_await wake.async_wait(use_nothrow);
        writer_parked = false;
        if (state == phase::closed) co_return;
    }
}

net::awaitable<void> connection::impl::watchdog() {
    // Call deadlines are swept at a fifth of command_timeout (at most every 100 ms).
    auto tick = std::clamp<std::chrono::milliseconds>(
        settings.command_timeout / 5, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
    net::steady_timer t(executor);
    for (;;) {
        t.expires_after(tick);
        co_await t.async_wait(use_nothrow);
        if (state == phase::closed) co_return;
        auto now = clock::now();
        mux.expire(now);
        if (recheck_says_reconnect()) co_return;
        if (auto oldest = mux.oldest_written(); oldest && now - *oldest > settings.watchdog) {
            // A stalled server must not grow memory without bound: drop and fail everything.
            last_error = "Redis did not answer within the watchdog limit";
            co_return;
        }
        if (state == phase::draining) {
            if (mux.pending() == 0) co_return;
            continue;
        }
        if (mux.pending() == 0 && now - last_write > settings.ping_interval) {
            mux.push(command("PING"), nullptr);
            wake_writer();
        }
    }
}

net::awaitable<void> connection::impl::watch_sentinels() {
    auto self = shared_from_this();
    co_await sentinels->watch();
}

// Readiness as a notification: `changed` never expires, so a wait on it ends only when
// notify_change() cancels it (or the waiter's own deadline passes).
net::awaitable<bool> connection::impl::wait_change(clock::time_point deadline) {
    auto self = shared_from_this();
    auto seen = changes;
    net::steady_timer until(executor, deadline);
    co_await (changed.async_wait(use_nothrow) || until.async_wait(use_nothrow));
    co_return changes != seen;
}

net::awaitable<bool> connection::impl::wait_up(clock::time_point deadline) {
    auto self = shared_from_this();
    for (;;) {
        if (state == phase::ready) co_return true;
        if (state == phase::draining || state == phase::closed || clock::now() >= deadline)
            co_return false;
        co_await wait_change(deadline);
    }
}

}  // namespace rategate::limiters::redis
