// Test support: a real redis-server on a free loopback port, started and killed by the test.
#pragma once

#include <sys/types.h>

#include <string>
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

}  // namespace rategate::test
