#include "limiters/redis/connection.hpp"

#include "limiters/redis/sentinel.hpp"

#include <algorithm>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <optional>
#include <random>

namespace rategate::limiters::redis {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using clock = std::chrono::steady_clock;
using namespace net::experimental::awaitable_operators;

namespace {
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

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

// One command of the connect handshake and its reply slot.
struct handshake_step {
    std::string what;
    std::shared_ptr<reply_slot> slot;
};
}  // namespace

struct connection::impl : std::enable_shared_from_this<impl> {
    impl(net::any_io_executor ex, connection_settings s, std::vector<script> sc)
        : executor(ex),
          settings(std::move(s)),
          scripts(std::move(sc)),
          socket(ex),
          wake(ex),
          retry(ex),
          ask_socket(ex),
          sub_socket(ex),
          sub_retry(ex),
          shas(scripts.size()),
          target{settings.host, settings.port} {}

    net::any_io_executor executor;
    connection_settings settings;
    std::vector<script> scripts;
    tcp::socket socket;
    net::steady_timer wake;   ///< the writer sleeps on it; cancel() wakes it
    net::steady_timer retry;  ///< reconnect backoff
    multiplexer mux;          ///< owns every pending request's reply slot
    tcp::socket ask_socket;   ///< Sentinel: asking a sentinel for the master
    tcp::socket sub_socket;   ///< Sentinel: the +switch-master subscription
    net::steady_timer sub_retry;
    std::vector<std::string> shas;
    endpoint target;                     ///< the server connected to (Sentinel: its master)
    std::size_t preferred_sentinel = 0;  ///< the sentinel that answered last
    phase state = phase::idle;
    bool ever_connected = false;
    clock::time_point connect_deadline{};  ///< resolve + connect + handshake
    clock::time_point last_write{};
    clock::time_point last_trouble{};     ///< last timeout or unavailable reply (health: degraded)
    std::shared_ptr<reply_slot> recheck;  ///< the ROLE probe after an unavailable reply
    std::string last_error;
    counters stats;
    std::vector<char> read_buffer = std::vector<char>(64 * 1024);
    std::minstd_rand rng{std::random_device{}()};

    std::string carry;           ///< what the socket did not take of a direct write
    bool writer_parked = false;  ///< the writer sleeps on `wake`, with no write of its own

    // New commands to write. On an idle connection (the writer asleep, nothing in flight) they
    // are written here, on the caller's stack (a non-blocking send): waking the writer first
    // would put a trip through the event loop's queue, behind every handler already in it,
    // between a call and its bytes. Otherwise the writer takes them, so that the commands of
    // one event-loop turn go out together (pipelining). What the socket does not take of a
    // direct write (or an error) is left to the writer.
    void wake_writer() {
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

    // Ends the socket and completes every pending request (calls, handshake steps, probes)
    // once, with `ec`. The parser starts fresh for the next connection.
    void lose_connection(std::error_code ec) {
        boost::system::error_code ignored;
        socket.close(ignored);
        recheck.reset();
        mux.fail_all(ec);
    }

    // ready -> draining: calls already sent still get their replies; nothing new is accepted.
    // Any other phase has no accepted call in flight: closed at once.
    void begin_drain() {
        if (state == phase::ready) {
            state = phase::draining;
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
    void close_now() {
        if (state == phase::closed) return;
        state = phase::closed;
        wake.cancel();
        retry.cancel();
        sub_retry.cancel();
        boost::system::error_code ignored;
        ask_socket.close(ignored);
        sub_socket.close(ignored);
        lose_connection(client_error::stopped);
    }

    std::string where() const { return target.host + ":" + std::to_string(target.port); }

    // Resolves and connects `s` to host:port before `deadline`; `why` says what failed.
    net::awaitable<std::error_code> open(tcp::socket& s, const std::string& host,
                                         std::uint16_t port, clock::time_point deadline,
                                         std::string& why) {
        boost::system::error_code ignored;
        s.close(ignored);
        s = tcp::socket(executor);
        auto name = host + ":" + std::to_string(port);
        tcp::resolver local(executor);
        net::steady_timer timer(executor, deadline);
        auto resolved = co_await (local.async_resolve(host, std::to_string(port), use_nothrow) ||
                                  timer.async_wait(use_nothrow));
        if (resolved.index() == 1) {
            why = "timed out resolving " + host;
            co_return make_error_code(client_error::timeout);
        }
        auto [rec, endpoints] = std::get<0>(resolved);
        if (rec) {
            why = "cannot resolve " + host + ": " + rec.message();
            co_return make_error_code(client_error::not_connected);
        }
        if (state == phase::closed) co_return make_error_code(client_error::stopped);
        timer.expires_at(deadline);
        auto connected_to = co_await (net::async_connect(s, endpoints, use_nothrow) ||
                                      timer.async_wait(use_nothrow));
        if (connected_to.index() == 1) {
            why = "timed out connecting to " + name;
            co_return make_error_code(client_error::timeout);
        }
        if (auto [cec, ep] = std::get<0>(connected_to); cec) {
            why = "cannot connect to " + name + ": " + cec.message();
            co_return make_error_code(client_error::not_connected);
        }
        s.set_option(tcp::no_delay(true), ignored);
        co_return std::error_code{};
    }

    // How a round trip on a socket ended.
    enum class trip { done, write_failed, timed_out, closed, garbled };

    // Writes what waits in `m` on `s`, then reads until `last` is answered, all before
    // `deadline` (the connect handshake, and the short exchanges with sentinels). `ec` says why
    // the socket closed.
    net::awaitable<std::pair<trip, boost::system::error_code>> round_trip(
        tcp::socket& s, multiplexer& m, const reply_slot& last, clock::time_point deadline,
        std::vector<char>& buf) {
        auto out = m.prepare_write();
        net::steady_timer timer(executor, deadline);
        auto wrote = co_await (net::async_write(s, net::buffer(out), use_nothrow) ||
                               timer.async_wait(use_nothrow));
        if (wrote.index() == 1 || std::get<0>(std::get<0>(wrote)))
            co_return std::pair{trip::write_failed, boost::system::error_code{}};
        m.commit_write(clock::now());
        while (!last.done()) {
            auto got = co_await (s.async_read_some(net::buffer(buf), use_nothrow) ||
                                 timer.async_wait(use_nothrow));
            if (got.index() == 1) co_return std::pair{trip::timed_out, boost::system::error_code{}};
            auto [ec, n] = std::get<0>(got);
            if (ec) co_return std::pair{trip::closed, ec};
            if (m.consume(buf.data(), n))
                co_return std::pair{trip::garbled, boost::system::error_code{}};
        }
        co_return std::pair{trip::done, boost::system::error_code{}};
    }

    // A short exchange on `s` with its own multiplexer: `commands` in one write, one reply
    // each, all before `deadline`. nullopt (and `why`) when the server did not answer in time.
    net::awaitable<std::optional<std::vector<reply>>> converse(tcp::socket& s,
                                                               std::vector<std::string> commands,
                                                               clock::time_point deadline,
                                                               std::string& why) {
        multiplexer m;
        std::vector<std::shared_ptr<reply_slot>> slots;
        for (auto& c : commands) {
            slots.push_back(std::make_shared<reply_slot>());
            m.push(std::move(c), slots.back());
        }
        std::vector<char> buf(4096);
        auto [t, ec] = co_await round_trip(s, m, *slots.back(), deadline, buf);
        switch (t) {
            case trip::done:
                break;
            case trip::write_failed:
                why = "write failed";
                co_return std::nullopt;
            case trip::timed_out:
                why = "no answer within command_timeout";
                co_return std::nullopt;
            case trip::closed:
                why = "connection closed: " + ec.message();
                co_return std::nullopt;
            case trip::garbled:
                why = "protocol error";
                co_return std::nullopt;
        }
        std::vector<reply> out_replies;
        for (auto& slot : slots)
            out_replies.push_back(std::move(slot->value()));
        co_return out_replies;
    }

    std::string sentinel_auth() const {
        const auto& st = *settings.sentinel;
        if (st.password.empty()) return {};
        return st.username.empty() ? command("AUTH", st.password)
                                   : command("AUTH", st.username, st.password);
    }

    // Sentinel: asks the sentinels, the one that answered last first, for the master's
    // address; one that does not answer within command_timeout is skipped.
    net::awaitable<std::error_code> discover() {
        const auto& st = *settings.sentinel;
        std::string tried;
        for (std::size_t k = 0; k < st.nodes.size(); ++k) {
            if (state != phase::connecting) co_return make_error_code(client_error::stopped);
            auto idx = (preferred_sentinel + k) % st.nodes.size();
            const auto& [host, port] = st.nodes[idx];
            auto name = host + ":" + std::to_string(port);
            auto deadline = clock::now() + settings.command_timeout;
            std::string why;
            std::optional<std::vector<reply>> replies;
            if (!co_await open(ask_socket, host, port, deadline, why)) {
                std::vector<std::string> cmds;
                if (auto auth = sentinel_auth(); !auth.empty()) cmds.push_back(std::move(auth));
                cmds.push_back(command("SENTINEL", "get-master-addr-by-name", st.master));
                replies = co_await converse(ask_socket, std::move(cmds), deadline, why);
            }
            boost::system::error_code ignored;
            ask_socket.close(ignored);
            if (replies) {
                if (replies->size() == 2 && replies->front().is_error()) {
                    why = "AUTH refused: " + replies->front().str;
                } else if (auto addr = parse_master_addr(replies->back())) {
                    target = *addr;
                    preferred_sentinel = idx;
                    co_return std::error_code{};
                } else {
                    why = replies->back().is_error() ? replies->back().str
                                                     : "does not know the master";
                }
            }
            tried += (tried.empty() ? "" : "; ") + name + ": " + why;
        }
        last_error = "no sentinel gave the address of master \"" + st.master + "\" (" + tried + ")";
        co_return make_error_code(client_error::not_connected);
    }

    // Sentinel: subscribed to +switch-master on one sentinel at a time (the next one when it
    // goes away, refuses, or stays silent: the subscription must be confirmed, and a PING
    // answered, within connect_timeout; it is pinged after a second without traffic); a
    // failover of our master drops the connection so that the next connect asks the sentinels
    // again, at once rather than at the next error.
    net::awaitable<void> watch_sentinels() {
        auto self = shared_from_this();
        const auto& st = *settings.sentinel;
        std::size_t idx = preferred_sentinel;
        auto backoff = settings.backoff_min;
        while (state != phase::closed && state != phase::draining) {
            const auto& [host, port] = st.nodes[idx % st.nodes.size()];
            std::string why;
            if (!co_await open(sub_socket, host, port, clock::now() + settings.connect_timeout,
                               why))
                co_await subscribed(st, backoff);
            boost::system::error_code ignored;
            sub_socket.close(ignored);
            if (state == phase::closed || state == phase::draining) break;
            ++idx;  // try the next sentinel
            std::uniform_real_distribution<double> jitter(0.5, 1.0);
            sub_retry.expires_after(
                std::chrono::milliseconds(static_cast<long>(backoff.count() * jitter(rng))));
            backoff = std::min(settings.backoff_max, backoff * 2);
            co_await sub_retry.async_wait(use_nothrow);
        }
    }

    // One subscription on sub_socket, until the sentinel fails, goes silent or we stop. One
    // reply slot is outstanding at a time: every reply (the confirmation, a message, a pong)
    // completes it. PINGs are written past the multiplexer, so its count stays one.
    net::awaitable<void> subscribed(const sentinel_settings& st,
                                    std::chrono::milliseconds& backoff) {
        multiplexer m;
        auto confirmed = std::make_shared<reply_slot>();
        if (auto auth = sentinel_auth(); !auth.empty()) m.push(std::move(auth), nullptr);
        m.push(command("SUBSCRIBE", "+switch-master"), confirmed);
        auto out = m.prepare_write();
        auto [wec, wn] = co_await net::async_write(sub_socket, net::buffer(out), use_nothrow);
        if (wec) co_return;
        m.commit_write(clock::now());
        std::vector<char> buf(4096);
        auto message = confirmed;
        auto answer_by = clock::now() + settings.connect_timeout;  // the confirmation
        const std::string ping = command("PING");
        net::steady_timer timer(executor);
        while (state != phase::closed && state != phase::draining) {
            if (message->done()) {
                if (message != confirmed) {
                    if (auto to = parse_switch_master(message->value(), st.master))
                        follow_failover(*to);
                } else if (confirmed->value().is_error()) {
                    co_return;  // refused (AUTH): try the next sentinel
                } else {
                    backoff = settings.backoff_min;  // subscribed
                }
                message = std::make_shared<reply_slot>();
                m.push(std::string(), message);  // the next reply, whatever it is
                m.prepare_write();
                m.commit_write(clock::now());
                answer_by = clock::time_point::max();
                continue;
            }
            auto idle_until = std::min(answer_by, clock::now() + settings.ping_interval);
            timer.expires_at(idle_until);
            auto got = co_await (sub_socket.async_read_some(net::buffer(buf), use_nothrow) ||
                                 timer.async_wait(use_nothrow));
            if (got.index() == 1) {
                if (clock::now() >= answer_by) co_return;  // silent: the next sentinel
                auto [pec, pn] =
                    co_await net::async_write(sub_socket, net::buffer(ping), use_nothrow);
                if (pec) co_return;
                answer_by = clock::now() + settings.connect_timeout;
                continue;
            }
            auto [ec, n] = std::get<0>(got);
            if (ec || m.consume(buf.data(), n)) co_return;
        }
    }

    // +switch-master for our master: leave the old one now (pending calls fail with
    // connection_lost), connect to whatever the sentinels name next.
    void follow_failover(const endpoint& to) {
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

    net::awaitable<void> run() {
        auto self = shared_from_this();
        auto backoff = settings.backoff_min;
        while (state != phase::closed && state != phase::draining) {
            state = phase::connecting;
            auto ec = co_await connect();
            if (!ec && state == phase::connecting) {
                state = phase::handshaking;
                ec = co_await handshake();
            }
            if (!ec && state == phase::handshaking) {
                state = phase::ready;
                if (ever_connected) ++stats.reconnects;
                ever_connected = true;
                last_error.clear();
                backoff = settings.backoff_min;
                last_write = clock::now();
                carry.clear();
                co_await (reader() || writer() || watchdog());
                writer_parked = false;  // however the writer ended
                ec = make_error_code(client_error::connection_lost);
            }
            bool ending = state == phase::draining || state == phase::closed;
            if (!ending) {
                // Not ready from here on: calls fail with not_connected until the next connect.
                state = phase::connecting;
                if (last_error.empty()) last_error = ec.message();
            }
            // Every request still pending ends here, exactly once: calls with connection_lost,
            // the steps of a failed handshake with its error.
            lose_connection(ending ? make_error_code(client_error::stopped) : ec);
            if (ending) break;
            // Capped exponential backoff with jitter (50-100% of the step), so that many
            // gateways do not reconnect in lockstep after a Redis restart.
            std::uniform_real_distribution<double> jitter(0.5, 1.0);
            auto delay =
                std::chrono::milliseconds(static_cast<long>(backoff.count() * jitter(rng)));
            backoff = std::min(settings.backoff_max, backoff * 2);
            retry.expires_after(delay);
            co_await retry.async_wait(use_nothrow);
        }
        state = phase::closed;
        lose_connection(client_error::stopped);
    }

    // connecting: (Sentinel: ask for the master, then) resolve and connect within
    // connect_timeout.
    net::awaitable<std::error_code> connect() {
        if (settings.sentinel)
            if (auto ec = co_await discover()) co_return ec;
        if (state != phase::connecting) co_return make_error_code(client_error::stopped);
        connect_deadline = clock::now() + settings.connect_timeout;
        std::string why;
        if (auto ec = co_await open(socket, target.host, target.port, connect_deadline, why)) {
            last_error = why;
            co_return ec;
        }
        co_return std::error_code{};
    }

    // handshaking: AUTH first, on its own (Redis drops an unauthenticated client that sends a
    // large command, such as a SCRIPT LOAD, before its AUTH reply could be read); then SELECT,
    // every SCRIPT LOAD and ROLE in one write, their replies in order. The steps' slots are
    // shared with the multiplexer, so when this fails half-way (timeout, closed socket) the run
    // loop's fail_all completes them safely.
    net::awaitable<std::error_code> handshake() {
        std::vector<handshake_step> steps;
        auto add = [&](std::string what, std::string encoded) {
            auto slot = std::make_shared<reply_slot>();
            mux.push(std::move(encoded), slot);
            steps.push_back({std::move(what), std::move(slot)});
        };
        std::size_t checked = 0;
        if (!settings.password.empty()) {
            add("AUTH", settings.username.empty()
                            ? command("AUTH", settings.password)
                            : command("AUTH", settings.username, settings.password));
            if (auto ec = co_await handshake_round(steps, checked)) co_return ec;
        }
        if (settings.db != 0) add("SELECT", command("SELECT", std::to_string(settings.db)));
        for (const auto& s : scripts)
            add("SCRIPT LOAD " + s.name, command("SCRIPT", "LOAD", s.source));
        // ROLE last: "ready" means this server answers, and is a master (our scripts write).
        add("ROLE", command("ROLE"));
        if (auto ec = co_await handshake_round(steps, checked)) co_return ec;
        std::size_t script_index = 0;
        for (auto& [what, slot] : steps)
            if (what.rfind("SCRIPT LOAD", 0) == 0) shas[script_index++] = slot->value().str;
        co_return std::error_code{};
    }

    // Writes the steps queued since the last round, reads until the last one is answered, and
    // judges steps[checked..]. A step refused by Redis names itself in last_error.
    net::awaitable<std::error_code> handshake_round(std::vector<handshake_step>& steps,
                                                    std::size_t& checked) {
        auto [t, ec] =
            co_await round_trip(socket, mux, *steps.back().slot, connect_deadline, read_buffer);
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
        for (; checked < steps.size(); ++checked) {
            const auto& [what, slot] = steps[checked];
            const auto& r = slot->value();
            if (slot->error()) {
                last_error = what + " failed: " + slot->error().message();
                co_return make_error_code(client_error::handshake_failed);
            }
            if (what == "ROLE") {
                if (auto why = role_problem(r); !why.empty()) {
                    last_error = why;
                    co_return make_error_code(client_error::handshake_failed);
                }
            } else if (r.is_error()) {
                last_error = what + " refused by Redis: " + r.str;
                co_return make_error_code(client_error::handshake_failed);
            }
        }
        co_return std::error_code{};
    }

    // Why a ROLE reply rules this server out ("" when it is usable). A user whose ACL forbids
    // ROLE (NOPERM) is taken at its word; an unavailable reply or a replica is not usable.
    std::string role_problem(const reply& r) const {
        if (r.is_unavailable_error()) return "Redis at " + where() + " answered ROLE with " + r.str;
        if (settings.require_master && r.type == reply::kind::array && !r.elements.empty() &&
            r.elements[0].str != "master")
            return "Redis at " + where() + " is a " + r.elements[0].str + ", not a master";
        return {};
    }

    // ready: after a READONLY, LOADING, MASTERDOWN, CLUSTERDOWN, OOM or BUSY reply, one ROLE
    // probe at a time asks whether this is still a master.
    void start_recheck(const std::string& what) {
        last_trouble = clock::now();
        if (recheck || state != phase::ready) return;
        ++stats.rechecks;
        recheck = std::make_shared<reply_slot>();
        mux.push(command("ROLE"), recheck, 1, clock::now() + settings.command_timeout);
        wake_writer();
        last_error = "Redis answered " + what.substr(0, what.find(' ')) + ": re-checking its role";
    }

    // True when the finished probe says to reconnect (a replica now, or no answer in time).
    bool recheck_says_reconnect() {
        if (!recheck || !recheck->done()) return false;
        auto probe = std::move(recheck);
        if (probe->error()) {
            last_error = "Redis did not answer the ROLE re-check: " + probe->error().message();
            return true;
        }
        if (auto why = role_problem(probe->value()); !why.empty()) {
            last_error = why + ": reconnecting";
            return true;
        }
        return false;
    }

    net::awaitable<void> reader() {
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

    net::awaitable<void> writer() {
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

    net::awaitable<void> watchdog() {
        // Call deadlines are swept at a fifth of command_timeout (at most every 100 ms).
        auto tick = std::clamp<std::chrono::milliseconds>(settings.command_timeout / 5,
                                                          std::chrono::milliseconds(1),
                                                          std::chrono::milliseconds(100));
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

    net::awaitable<result> exec(std::string encoded, std::size_t replies = 1) {
        auto self = shared_from_this();
        ++stats.commands;
        if (state == phase::draining || state == phase::closed)
            co_return fail(client_error::stopped);
        if (state != phase::ready) co_return fail(client_error::not_connected);
        if (mux.pending() >= settings.max_pending) co_return fail(client_error::too_many_pending);
        auto slot = std::make_shared<call_slot>(executor);
        auto id =
            mux.push(std::move(encoded), slot, replies, clock::now() + settings.command_timeout);
        wake_writer();
        co_await net::async_initiate<const net::use_awaitable_t<>&, void()>(
            [this, &slot, id](auto handler) { wait_for(slot, id, std::move(handler)); },
            net::use_awaitable);
        std::error_code ec = slot->error();
        reply value = std::move(slot->value());
        if (!ec && value.is_unavailable_error()) {
            ec = make_error_code(client_error::server_unavailable);
            ++stats.unavailable;
        }
        if (ec == client_error::timeout) {
            ++stats.timeouts;
            last_trouble = clock::now();
        }
        if (ec) ++stats.errors;
        co_return result{ec, std::move(value)};
    }

    // Parks the waiter's handler in its slot. A cancellation of the waiter abandons the request
    // (a written one keeps its FIFO place) and completes the slot with operation_canceled.
    template <class Handler>
    void wait_for(const std::shared_ptr<call_slot>& slot, multiplexer::handle id, Handler handler) {
        auto cs = net::get_associated_cancellation_slot(handler);
        slot->handler.emplace(std::move(handler));
        if (slot->done()) {  // completed already: resume at once (through the executor)
            slot->notify();
            return;
        }
        if (!cs.is_connected()) return;
        slot->cancel = cs;
        cs.assign(
            [w = weak_from_this(), s = std::weak_ptr<call_slot>(slot), id](net::cancellation_type) {
                auto self = w.lock();
                auto c = s.lock();
                if (!self || !c || c->done()) return;
                c->cancel = net::cancellation_slot();  // running inside it: never clear() it here
                self->mux.abandon(id);
                c->on_reply(std::make_error_code(std::errc::operation_canceled), reply{});
            });
    }

    result fail(client_error e) {
        ++stats.errors;
        return result{make_error_code(e), {}};
    }
};

connection::connection(net::any_io_executor ex, connection_settings settings,
                       std::vector<script> scripts)
    : impl_(std::make_shared<impl>(std::move(ex), std::move(settings), std::move(scripts))) {}

connection::~connection() {
    close();
}

void connection::start() {
    if (impl_->state != phase::idle) return;
    impl_->state = phase::connecting;
    net::co_spawn(impl_->executor, impl_->run(), net::detached);
    if (impl_->settings.sentinel && !impl_->settings.sentinel->nodes.empty())
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
    co_return co_await i->exec(std::move(encoded));
}

net::awaitable<result> connection::exec(std::string encoded, std::size_t replies) {
    auto i = impl_;
    co_return co_await i->exec(std::move(encoded), replies);
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
    auto r = co_await i->exec(encode(), replies);
    if (!r.ec && r.value.is_error("NOSCRIPT")) {
        // Redis lost its script cache (restart, failover, SCRIPT FLUSH): EVAL caches it again.
        ++i->stats.noscript_retries;
        argv[0] = "EVAL";
        argv[1] = i->scripts[index].source;
        r = co_await i->exec(encode(), replies);
    }
    co_return r;
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
