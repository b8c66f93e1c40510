#include "limiters/redis/connection.hpp"

#include <algorithm>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
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

// One pending exec(): the multiplexer completes it (reply, connection loss, or expire() at its
// deadline), which resumes the caller. No timer per call: deadlines are swept by the watchdog.
struct call final : reply_sink {
    explicit call(net::any_io_executor e) : ex(std::move(e)) {}
    void on_reply(std::error_code e, reply&& r) override {
        done = true;
        ec = e;
        value = std::move(r);
        if (handler) {
            net::post(ex, [h = std::move(*handler)]() mutable { std::move(h)(); });
            handler.reset();
        }
    }
    net::any_io_executor ex;
    std::optional<net::any_completion_handler<void()>> handler;
    bool done = false;
    std::error_code ec;
    reply value;
};

// Collects the replies of the connect handshake.
struct collector final : reply_sink {
    void on_reply(std::error_code e, reply&& r) override {
        done = true;
        ec = e;
        value = std::move(r);
    }
    bool done = false;
    std::error_code ec;
    reply value;
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
          shas(scripts.size()) {}

    net::any_io_executor executor;
    connection_settings settings;
    std::vector<script> scripts;
    tcp::socket socket;
    net::steady_timer wake;   ///< the writer sleeps on it; cancel() wakes it
    net::steady_timer retry;  ///< reconnect backoff
    multiplexer mux;
    std::vector<std::string> shas;
    bool connected = false;
    bool stopped = false;
    bool started = false;
    bool ever_connected = false;
    clock::time_point last_write{};
    clock::time_point last_timeout{};
    std::string last_error;
    counters stats;
    std::vector<char> read_buffer = std::vector<char>(64 * 1024);
    std::minstd_rand rng{std::random_device{}()};

    void wake_writer() { wake.cancel(); }

    void drop(std::string_view why) {
        if (!why.empty()) last_error = why;
        connected = false;
        boost::system::error_code ignored;
        socket.close(ignored);
        mux.fail_all(client_error::connection_lost);
    }

    net::awaitable<void> run() {
        auto self = shared_from_this();
        auto backoff = settings.backoff_min;
        while (!stopped) {
            auto ec = co_await connect_and_handshake();
            if (!ec && !stopped) {
                connected = true;
                if (ever_connected) ++stats.reconnects;
                ever_connected = true;
                last_error.clear();
                backoff = settings.backoff_min;
                last_write = clock::now();
                co_await (reader() || writer() || watchdog());
                drop("");
            } else {
                drop(last_error.empty() ? ec.message() : last_error);
            }
            if (stopped) break;
            // Capped exponential backoff with jitter (50-100% of the step), so that many
            // gateways do not reconnect in lockstep after a Redis restart.
            std::uniform_real_distribution<double> jitter(0.5, 1.0);
            auto delay =
                std::chrono::milliseconds(static_cast<long>(backoff.count() * jitter(rng)));
            backoff = std::min(settings.backoff_max, backoff * 2);
            retry.expires_after(delay);
            co_await retry.async_wait(use_nothrow);
        }
        connected = false;
        mux.fail_all(client_error::stopped);
    }

    net::awaitable<std::error_code> connect_and_handshake() {
        boost::system::error_code ignored;
        socket.close(ignored);
        socket = tcp::socket(executor);
        auto deadline = clock::now() + settings.connect_timeout;
        tcp::resolver resolver(executor);
        net::steady_timer timer(executor, deadline);
        auto resolved = co_await (
            resolver.async_resolve(settings.host, std::to_string(settings.port), use_nothrow) ||
            timer.async_wait(use_nothrow));
        if (resolved.index() == 1) co_return make_error_code(client_error::timeout);
        auto [rec, endpoints] = std::get<0>(resolved);
        if (rec) {
            last_error = "cannot resolve " + settings.host + ": " + rec.message();
            co_return make_error_code(client_error::not_connected);
        }
        timer.expires_at(deadline);
        auto connected_to = co_await (net::async_connect(socket, endpoints, use_nothrow) ||
                                      timer.async_wait(use_nothrow));
        if (connected_to.index() == 1) {
            last_error =
                "timed out connecting to " + settings.host + ":" + std::to_string(settings.port);
            co_return make_error_code(client_error::timeout);
        }
        if (auto [cec, ep] = std::get<0>(connected_to); cec) {
            last_error = "cannot connect to " + settings.host + ":" +
                         std::to_string(settings.port) + ": " + cec.message();
            co_return make_error_code(client_error::not_connected);
        }
        socket.set_option(tcp::no_delay(true), ignored);

        // AUTH, SELECT, every SCRIPT LOAD and a PING go out in one write; their replies come back
        // in order. The PING makes "connected" mean "Redis answers", not just "TCP accepted".
        std::vector<std::pair<std::string, collector>> steps;
        steps.reserve(3 + scripts.size());
        if (!settings.password.empty()) steps.push_back({"AUTH", {}});
        if (settings.db != 0) steps.push_back({"SELECT", {}});
        for (const auto& s : scripts)
            steps.push_back({"SCRIPT LOAD " + s.name, {}});
        steps.push_back({"PING", {}});
        std::size_t i = 0;
        if (!settings.password.empty())
            mux.push(command("AUTH", settings.password), &steps[i++].second);
        std::string db = std::to_string(settings.db);
        if (settings.db != 0) mux.push(command("SELECT", db), &steps[i++].second);
        for (const auto& s : scripts)
            mux.push(command("SCRIPT", "LOAD", s.source), &steps[i++].second);
        mux.push(command("PING"), &steps[i++].second);

        auto out = mux.prepare_write();
        timer.expires_at(deadline);
        auto wrote = co_await (net::async_write(socket, net::buffer(out), use_nothrow) ||
                               timer.async_wait(use_nothrow));
        if (wrote.index() == 1 || std::get<0>(std::get<0>(wrote))) {
            last_error = "handshake write to Redis failed";
            co_return make_error_code(client_error::handshake_failed);
        }
        mux.commit_write(clock::now());
        while (!steps.back().second.done) {
            auto got = co_await (socket.async_read_some(net::buffer(read_buffer), use_nothrow) ||
                                 timer.async_wait(use_nothrow));
            if (got.index() == 1) {
                last_error = "Redis handshake timed out";
                co_return make_error_code(client_error::timeout);
            }
            auto [ec, n] = std::get<0>(got);
            if (ec) {
                last_error = "Redis closed the connection during the handshake: " + ec.message();
                co_return make_error_code(client_error::handshake_failed);
            }
            if (auto pe = mux.consume(read_buffer.data(), n)) {
                last_error = "Redis protocol error during the handshake";
                co_return pe;
            }
        }
        std::size_t script_index = 0;
        for (auto& [what, c] : steps) {
            if (c.value.is_error()) {
                last_error = what + " refused by Redis: " + c.value.str;
                co_return make_error_code(client_error::handshake_failed);
            }
            if (what.rfind("SCRIPT LOAD", 0) == 0) shas[script_index++] = c.value.str;
        }
        co_return std::error_code{};
    }

    net::awaitable<void> reader() {
        for (;;) {
            auto [ec, n] = co_await socket.async_read_some(net::buffer(read_buffer), use_nothrow);
            if (ec) {
                // Cancelled by a sibling (watchdog, writer): keep the sibling's reason.
                if (ec != net::error::operation_aborted)
                    last_error = "Redis connection closed: " + ec.message();
                co_return;
            }
            if (mux.consume(read_buffer.data(), n)) {
                last_error = "Redis protocol error: reconnecting with a fresh parser";
                co_return;
            }
        }
    }

    net::awaitable<void> writer() {
        for (;;) {
            while (mux.has_waiting()) {
                auto out = mux.prepare_write();
                auto [ec, n] = co_await net::async_write(socket, net::buffer(out), use_nothrow);
                if (ec) {
                    if (ec != net::error::operation_aborted)
                        last_error = "Redis write failed: " + ec.message();
                    co_return;
                }
                last_write = clock::now();
                mux.commit_write(last_write);
            }
            wake.expires_at(clock::time_point::max());
            co_await wake.async_wait(use_nothrow);
            if (stopped) co_return;
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
            if (stopped) co_return;
            auto now = clock::now();
            mux.expire(now);
            if (auto oldest = mux.oldest_written(); oldest && now - *oldest > settings.watchdog) {
                // A stalled server must not grow memory without bound: drop and fail everything.
                last_error = "Redis did not answer within the watchdog limit";
                co_return;
            }
            if (mux.pending() == 0 && now - last_write > settings.ping_interval) {
                mux.push(command("PING"), nullptr);
                wake_writer();
            }
        }
    }

    net::awaitable<result> exec(std::string encoded) {
        auto self = shared_from_this();
        ++stats.commands;
        if (stopped) co_return fail(client_error::stopped);
        if (!connected) co_return fail(client_error::not_connected);
        if (mux.pending() >= settings.max_pending) co_return fail(client_error::too_many_pending);
        call c(executor);
        mux.push(std::move(encoded), &c, 1, clock::now() + settings.command_timeout);
        wake_writer();
        co_await net::async_initiate<const net::use_awaitable_t<>&, void()>(
            [&c](auto handler) { c.handler.emplace(std::move(handler)); }, net::use_awaitable);
        if (c.ec == client_error::timeout) {
            ++stats.timeouts;
            last_timeout = clock::now();
        }
        if (c.ec) ++stats.errors;
        co_return result{c.ec, std::move(c.value)};
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
    stop();
}

void connection::start() {
    if (impl_->started) return;
    impl_->started = true;
    net::co_spawn(impl_->executor, impl_->run(), net::detached);
}

void connection::stop() {
    if (impl_->stopped) return;
    impl_->stopped = true;
    boost::system::error_code ignored;
    // Wakes the run loop; it fails whatever is pending with `stopped` and ends.
    net::post(impl_->executor, [i = impl_] {
        boost::system::error_code ignored2;
        i->socket.cancel(ignored2);
        i->socket.close(ignored2);
        i->wake.cancel();
        i->retry.cancel();
    });
}

net::awaitable<result> connection::exec(std::string encoded) {
    auto i = impl_;
    co_return co_await i->exec(std::move(encoded));
}

net::awaitable<result> connection::eval(std::size_t index,
                                        const std::vector<std::string_view>& keys,
                                        const std::vector<std::string_view>& args) {
    auto i = impl_;
    std::string numkeys = std::to_string(keys.size());
    std::vector<std::string_view> argv;
    argv.reserve(3 + keys.size() + args.size());
    argv.push_back("EVALSHA");
    argv.push_back(i->shas[index]);
    argv.push_back(numkeys);
    argv.insert(argv.end(), keys.begin(), keys.end());
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = co_await i->exec(encode_command(argv));
    if (!r.ec && r.value.is_error("NOSCRIPT")) {
        // Redis lost its script cache (restart, failover, SCRIPT FLUSH): EVAL caches it again.
        ++i->stats.noscript_retries;
        argv[0] = "EVAL";
        argv[1] = i->scripts[index].source;
        r = co_await i->exec(encode_command(argv));
    }
    co_return r;
}

connection::health connection::state() const {
    if (!impl_->connected) return health::down;
    if (clock::now() - impl_->last_timeout < std::chrono::seconds(1)) return health::degraded;
    return health::connected;
}

std::string connection::last_error() const {
    return impl_->last_error;
}

connection::counters connection::stats() const {
    auto c = impl_->stats;
    c.writes = impl_->mux.writes();
    c.commands_written = impl_->mux.commands_written();
    return c;
}

}  // namespace rategate::limiters::redis
