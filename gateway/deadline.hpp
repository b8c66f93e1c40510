// Coarse per-event-loop deadlines for sockets. Beast's tcp_stream arms a kernel timer around
// every read and write (a timerfd_settime per operation); here an operation only stores its
// deadline, and one sweep every `resolution` cancels the sockets whose deadline has passed.
// Timeouts are therefore late by at most one resolution step (100 ms).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <list>

namespace rategate::gateway {

class deadline_sweeper;

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

/// A socket and its deadline: what the session and the upstream pool read and write through.
struct timed_socket {
    timed_socket(boost::asio::ip::tcp::socket s, deadline_sweeper& sweeper)
        : socket(std::move(s)), timer(sweeper, socket) {}
    boost::asio::ip::tcp::socket socket;
    deadline timer;
};

class deadline_sweeper {
  public:
    explicit deadline_sweeper(std::chrono::milliseconds resolution = std::chrono::milliseconds(100))
        : resolution_(resolution) {}

    /// Sweeps until stop() was called and every deadline has unregistered.
    boost::asio::awaitable<void> run();
    void stop() { stopping_ = true; }
    std::size_t size() const { return slots_.size(); }

  private:
    friend class deadline;
    std::chrono::milliseconds resolution_;
    std::list<deadline::slot> slots_;
    bool stopping_ = false;
};

}  // namespace rategate::gateway
