#include "gateway/proxy/upstream_pool.hpp"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstring>

#include "gateway/http2/client.hpp"
#include "gateway/proxy/tls.hpp"

namespace rategate::gateway {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

}  // namespace

upstream_pool::upstream_pool(net::any_io_executor ex, deadline_sweeper& sweeper,
                             const config::upstream_config& cfg)
    : ex_(std::move(ex)), sweeper_(sweeper), cfg_(cfg) {
    for (const auto& t : cfg_.targets)
        targets_.push_back({t, t.to_string(), {}, {}, {}, false, {}, 0, {}});
    // "h2" is HTTP/2 over TLS: the upstream's tls block, or the defaults (SPEC §3).
    if (cfg_.tls || cfg_.protocol == config::upstream_protocol::h2)
        tls_ = make_client_tls(cfg_.tls.value_or(config::tls_client_config{}));
}

upstream_pool::~upstream_pool() {
    close_idle();
}

std::size_t upstream_pool::next_target() {
    auto t = next_;
    next_ = (next_ + 1) % targets_.size();
    return t;
}

std::unique_ptr<upstream_connection> upstream_pool::take_idle(std::size_t target) {
    auto& ts = targets_[target];
    if (ts.idle.empty()) return nullptr;
    // Every pooled connection is live: its watch (release()) takes out one that got bytes or
    // a close. The watch stays queued (see release); its id no longer matches a pooling.
    auto c = std::move(ts.idle.back());
    ts.idle.pop_back();
    c->watch = 0;
    c->reused = true;
    return c;
}

net::awaitable<std::unique_ptr<upstream_connection>> upstream_pool::acquire(
    std::size_t target, boost::system::error_code& ec, bool allow_reuse,
    std::chrono::steady_clock::time_point by) {
    auto& ts = targets_[target];
    if (allow_reuse) {
        if (auto c = take_idle(target)) {
            ec = {};
            co_return c;
        }
    }
    if (ts.endpoints.empty()) {
        // A numeric address needs no resolver: Asio's runs getaddrinfo on a thread of its own,
        // and a second thread makes every socket call of a one-loop process dearer (the
        // kernel's fdget/fput take their atomic path once a process has two threads).
        boost::system::error_code numeric;
        auto address = net::ip::make_address(ts.address.host, numeric);
        if (!numeric) {
            ts.endpoints.emplace_back(address, ts.address.port);
        } else {
            tcp::resolver resolver(ex_);
            auto [rec, results] = co_await resolver.async_resolve(
                ts.address.host, std::to_string(ts.address.port), use_nothrow);
            if (rec) {
                ec = rec;
                co_return nullptr;
            }
            for (const auto& r : results)
                ts.endpoints.push_back(r.endpoint());
        }
    }
    auto c = std::make_unique<upstream_connection>(ex_, sweeper_);
    c->target = target;
    c->io.timer.expires_at(std::min(coarse_now() + cfg_.connect_timeout, by));
    auto [cec, endpoint] = co_await net::async_connect(c->io.socket, ts.endpoints, use_nothrow);
    if (cec) {
        ts.endpoints.clear();  // re-resolve next time: the address may have moved
        ec = c->io.timer.expired() ? make_error_code(net::error::timed_out) : cec;
        co_return nullptr;
    }
    boost::system::error_code ignored;
    c->io.socket.set_option(tcp::no_delay(true), ignored);
    if (tls_) {
        const auto tls_cfg = cfg_.tls.value_or(config::tls_client_config{});
        const std::string& name = tls_cfg.server_name ? *tls_cfg.server_name : ts.address.host;
        c->io.tls = std::make_unique<tls_stream>(c->io.socket, *tls_);
        auto* ssl = c->io.tls->native_handle();
        const bool h2 = cfg_.protocol == config::upstream_protocol::h2;
        if (h2) {
            static constexpr unsigned char alpn_h2[] = {2, 'h', '2'};  // RFC 7301 §3.1
            SSL_set_alpn_protos(ssl, alpn_h2, sizeof alpn_h2);
        }
        // SNI (RFC 6066 §3) carries host names only, never IP literals.
        boost::system::error_code not_ip;
        net::ip::make_address(name, not_ip);
        if (not_ip) SSL_set_tlsext_host_name(ssl, name.c_str());
        if (tls_cfg.verify) c->io.tls->set_verify_callback(net::ssl::host_name_verification(name));
        auto [hec] =
            co_await c->io.tls->async_handshake(net::ssl::stream_base::client, use_nothrow);
        if (hec) {
            ec = c->io.timer.expired() ? make_error_code(net::error::timed_out) : hec;
            co_return nullptr;
        }
        if (h2) {
            // A target whose ALPN picks anything else (or nothing) is not an HTTP/2 server.
            const unsigned char* got = nullptr;
            unsigned len = 0;
            SSL_get0_alpn_selected(ssl, &got, &len);
            if (len != 2 || std::memcmp(got, "h2", 2) != 0) {
                ec = make_error_code(net::error::no_protocol_option);
                co_return nullptr;
            }
        }
    }
    ec = {};
    co_return c;
}

void upstream_pool::release(std::unique_ptr<upstream_connection> c) {
    auto& ts = targets_[c->target];
    if (ts.idle.size() >= cfg_.max_idle_per_target || c->buffer.size() != 0) return;  // closes it
    c->io.timer.expires_never();
    // The watch: a wait for readability. Its completing while this pooling lasts means bytes
    // or a close came: out of the pool. Left queued when the connection is taken, it completes
    // with the response (ignored then) and the response's read, queued behind it, tries no
    // read first: the wait's one epoll_ctl takes the place of that read's EAGAIN.
    c->watch = ++watches_;
    c->io.socket.async_wait(
        tcp::socket::wait_read,
        [this, life = std::weak_ptr<char>(life_), target = c->target, raw = c.get(),
         id = c->watch](const boost::system::error_code& ec) {
            if (ec || life.expired()) return;  // the socket closed, or the pool is gone
            auto& idle = targets_[target].idle;
            // Found only while this pooling lasts: pointers are compared, ids then read.
            std::erase_if(idle, [&](const auto& p) { return p.get() == raw && p->watch == id; });
        });
    ts.idle.push_back(std::move(c));
}

void upstream_pool::close_idle() {
    for (auto& t : targets_) {
        t.idle.clear();
        for (auto& c : t.h2)
            c->close_when_idle();
        t.h2.clear();
    }
}

net::awaitable<std::shared_ptr<http2::client_connection>> upstream_pool::acquire_h2(
    std::size_t target, boost::system::error_code& ec, std::size_t max_header_bytes,
    std::chrono::steady_clock::time_point by) {
    auto& ts = targets_[target];
    const auto connect_by = std::min(std::chrono::steady_clock::now() + cfg_.connect_timeout, by);
    for (;;) {
        // Dead connections go, and idle ones (no stream open) beyond max_idle_per_target: a
        // burst past the upstream's stream limit opened them, idle they hold its sockets.
        std::size_t idle = 0;
        std::erase_if(ts.h2, [&](const auto& c) {
            if (c->alive() && (c->active_streams() > 0 || ++idle <= cfg_.max_idle_per_target))
                return false;
            c->close_when_idle();
            return true;
        });
        for (auto& c : ts.h2)
            if (c->available()) {
                ec = {};
                co_return c;
            }
        if (!ts.h2_connecting) break;
        // Another request of this loop is opening a connection to the target: wait for it
        // rather than open one each (one connection per target until its stream limit), up
        // to this request's own connect deadline.
        const auto opened = ts.h2_opened;
        net::steady_timer wait(ex_);
        wait.expires_at(connect_by);
        ts.h2_waiters.push_back(&wait);
        auto [wec] = co_await wait.async_wait(use_nothrow);
        std::erase(ts.h2_waiters, &wait);
        if (!wec) {  // not woken by the opener: the deadline passed
            ec = make_error_code(net::error::timed_out);
            co_return nullptr;
        }
        if (ts.h2_opened != opened && ts.h2_failure) {
            ec = ts.h2_failure;  // the opening waited on failed: so does this request
            co_return nullptr;
        }
    }
    ts.h2_connecting = true;
    struct connecting_mark {
        target_state& ts;
        boost::system::error_code& ec;
        ~connecting_mark() {
            ts.h2_connecting = false;
            ++ts.h2_opened;
            ts.h2_failure = ec;
            for (auto* w : ts.h2_waiters)
                w->cancel();  // every waiter wakes and looks again
        }
    } mark{ts, ec};
    auto io = co_await acquire(target, ec, /*allow_reuse=*/false, connect_by);
    if (ec) co_return nullptr;
    http2::client_settings s;
    s.max_header_bytes = max_header_bytes;
    auto c = std::make_shared<http2::client_connection>(std::move(io), s);
    c->start();
    // Streams wait for the upstream's SETTINGS (within connect_timeout): until then its
    // stream limit is unknown, and a burst of requests could open more streams than it takes.
    bool ready = co_await c->wait_settings(std::max(
        std::chrono::ceil<std::chrono::milliseconds>(connect_by - std::chrono::steady_clock::now()),
        std::chrono::milliseconds(1)));
    if (!ready) {
        c->close_when_idle();
        ec = make_error_code(c->alive() ? net::error::timed_out : net::error::connection_reset);
        co_return nullptr;
    }
    if (!c->takes_streams()) {
        // MAX_CONCURRENT_STREAMS 0: a connection no request can use (one per request leaked).
        c->close_when_idle();
        ec = make_error_code(net::error::connection_refused);
        co_return nullptr;
    }
    ts.h2.push_back(c);
    co_return c;
}

std::size_t upstream_pool::idle_count() const {
    std::size_t n = 0;
    for (const auto& t : targets_) {
        n += t.idle.size();
        for (const auto& c : t.h2)
            n += c->alive() && c->active_streams() == 0;
    }
    return n;
}

}  // namespace rategate::gateway
