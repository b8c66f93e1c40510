// Coarse per-event-loop deadlines for sockets. Beast's tcp_stream arms a kernel timer around
// every read and write (a timerfd_settime per operation); here an operation only stores its
// deadline, and one sweep every `resolution` cancels the sockets whose deadline has passed.
// Timeouts are therefore late by at most one resolution step (100 ms).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <chrono>
#include <list>
#include <memory>

namespace rategate::gateway {

class deadline_sweeper;

/// The steady clock as of the kernel's last tick (CLOCK_MONOTONIC_COARSE: steady_clock's
/// origin, at most one tick, 1–4 ms, behind it), for a few ns instead of a clock read. For
/// deadlines and idle ages, which are swept far more coarsely than a tick; not for latencies.
std::chrono::steady_clock::time_point coarse_now();

/// A socket's deadline. Registered for the socket's lifetime (RAII); arming is a plain store.
class deadline {
  public:
    using clock = std::chrono::steady_clock;
    deadline(deadline_sweeper& sweeper, boost::asio::ip::tcp::socket& socket);
    ~deadline();
    deadline(const deadline&) = delete;
    deadline& operator=(const deadline&) = delete;

    /// The next operations must finish within `d`; clears an earlier expiry.
    void expires_after(std::chrono::milliseconds d);
    /// The next operations must finish by `at` (a coarse_now() time); clears an earlier expiry.
    void expires_at(clock::time_point at);
    void expires_never();
    /// True once the sweeper cancelled the socket because the deadline passed.
    bool expired() const;

    struct slot {
        boost::asio::ip::tcp::socket* socket;
        clock::time_point at;
        bool expired;
    };

  private:
    deadline_sweeper& sweeper_;
    std::list<slot>::iterator slot_;
};

/// TLS over a socket owned elsewhere (the timed_socket's).
using tls_stream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>;

/// A socket, TLS over it when `tls` is set, and its deadline: the one stream type (Beast's
/// AsyncReadStream and AsyncWriteStream) the session, the relay and the upstream pool read and
/// write through, plain or TLS alike. Reads and writes go through TLS once `tls` is set; the
/// deadline cancels the socket under both.
struct timed_socket {
    using executor_type = boost::asio::ip::tcp::socket::executor_type;
    timed_socket(boost::asio::ip::tcp::socket s, deadline_sweeper& sweeper)
        : socket(std::move(s)), timer(sweeper, socket) {}
    boost::asio::ip::tcp::socket socket;
    deadline timer;
    std::unique_ptr<tls_stream> tls;

    executor_type get_executor() { return socket.get_executor(); }
    template <class MutableBuffers, class Token>
    auto async_read_some(const MutableBuffers& b, Token&& token) {
        if (tls) return tls->async_read_some(b, std::forward<Token>(token));
        return socket.async_read_some(b, std::forward<Token>(token));
    }
    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& b, Token&& token) {
        if (tls) return tls->async_write_some(b, std::forward<Token>(token));
        return socket.async_write_some(b, std::forward<Token>(token));
    }
};

class deadline_sweeper {
  public:
    explicit deadline_sweeper(std::chrono::milliseconds resolution = std::chrono::milliseconds(100))
        : resolution_(resolution) {}

    /// Sweeps until cancelled (the loop's tickers are cancelled after its sessions ended).
    boost::asio::awaitable<void> run();
    std::size_t size() const { return slots_.size(); }

  private:
    friend class deadline;
    std::chrono::milliseconds resolution_;
    std::list<deadline::slot> slots_;
};

}  // namespace rategate::gateway
