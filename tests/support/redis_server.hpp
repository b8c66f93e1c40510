// Test support: a real redis-server on a free loopback port, started and killed by the test.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rategate::test {

/// A free TCP port on 127.0.0.1 (bound and released).
unsigned short free_port();

class redis_server {
  public:
    /// Starts redis-server (no persistence) with `extra` arguments, e.g. {"--requirepass", "pw"}.
    explicit redis_server(std::vector<std::string> extra = {}, unsigned short port = 0);
    ~redis_server();
    redis_server(const redis_server&) = delete;
    redis_server& operator=(const redis_server&) = delete;

    unsigned short port() const { return port_; }
    void kill();     ///< SIGKILL and reap
    void restart();  ///< start again on the same port with the same arguments
    /// Runs redis-cli against the server and returns its stdout (trailing newline removed).
    std::string cli(const std::string& args) const;

  private:
    void start();
    std::vector<std::string> extra_;
    unsigned short port_;
    pid_t pid_ = -1;
};

/// A TCP proxy on a free loopback port in front of a server (a redis-server), which injects
/// the faults the Redis client must survive. Runs its own thread; plain POSIX sockets.
class fault_proxy {
  public:
    enum class mode {
        pass,            ///< forward both ways
        close_at_first,  ///< accept, read the client's first bytes, close (FIN)
        reset_at_first,  ///< accept, read the client's first bytes, reset (RST, SO_LINGER 0)
        silent,          ///< accept and read, never answer
        refuse,          ///< accept and close at once, before reading anything
    };

    explicit fault_proxy(unsigned short target_port, mode m = mode::pass);
    ~fault_proxy();
    fault_proxy(const fault_proxy&) = delete;
    fault_proxy& operator=(const fault_proxy&) = delete;

    unsigned short port() const { return port_; }
    /// Applies to connections accepted from now on.
    void set_mode(mode m) { mode_ = m; }
    /// Cuts every open connection now, with a FIN (`reset` false) or an RST (true); returns
    /// once they are cut.
    void cut(bool reset);
    /// Connections accepted so far.
    std::size_t accepted() const { return accepted_; }

  private:
    struct link {
        int client;
        int server;  ///< -1 while the connection is a fault
        mode fault;
    };
    void loop();
    void drop(link& l, bool reset);

    unsigned short target_;
    unsigned short port_ = 0;
    int listener_ = -1;
    int wake_[2] = {-1, -1};
    std::atomic<mode> mode_;
    std::atomic<int> cut_{0};  ///< 0 none, 1 FIN, 2 RST: handled by the proxy thread
    std::atomic<bool> stop_{false};
    std::atomic<std::size_t> accepted_{0};
    std::vector<link> links_;  ///< the proxy thread's only
    std::thread thread_;
};

}  // namespace rategate::test
