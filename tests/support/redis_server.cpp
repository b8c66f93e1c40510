#include "tests/support/redis_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace rategate::test {

unsigned short free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

namespace {
bool port_open(unsigned short port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
}
}  // namespace

redis_server::redis_server(std::vector<std::string> extra, unsigned short port)
    : extra_(std::move(extra)), port_(port ? port : free_port()) {
    start();
}

redis_server::~redis_server() {
    kill();
}

void redis_server::start() {
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     std::to_string(port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no",
                                     "--loglevel",
                                     "warning",
                                     "--logfile",
                                     "/dev/null"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(), environ) != 0)
        throw std::runtime_error("cannot start redis-server (is it installed?)");
    for (int i = 0; i < 500; ++i) {
        if (port_open(port_)) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("redis-server did not start on port " + std::to_string(port_));
}

void redis_server::kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
}

void redis_server::restart() {
    kill();
    start();
}

std::string redis_server::cli(const std::string& args) const {
    std::string auth;
    for (std::size_t i = 0; i + 1 < extra_.size(); ++i)
        if (extra_[i] == "--requirepass") auth = " --no-auth-warning -a " + extra_[i + 1];
    std::string cmd = "redis-cli -p " + std::to_string(port_) + auth + " " + args + " 2>&1";
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
        std::array<char, 4096> buf;
        while (auto n = std::fread(buf.data(), 1, buf.size(), p))
            out.append(buf.data(), n);
        ::pclose(p);
    }
    while (!out.empty() && out.back() == '\n')
        out.pop_back();
    return out;
}

namespace {
int connect_loopback(unsigned short port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

bool send_all(int fd, const char* p, std::size_t n) {
    while (n > 0) {
        auto w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

void close_fd(int fd, bool reset) {
    if (fd < 0) return;
    if (reset) {
        linger l{1, 0};  // close() sends an RST instead of a FIN
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    ::close(fd);
}
}  // namespace

fault_proxy::fault_proxy(unsigned short target_port, mode m) : target_(target_port), mode_(m) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_, 128) != 0 || ::pipe(wake_) != 0)
        throw std::runtime_error("fault_proxy: cannot listen");
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { loop(); });
}

fault_proxy::~fault_proxy() {
    stop_ = true;
    char b = 0;
    [[maybe_unused]] auto n = ::write(wake_[1], &b, 1);
    thread_.join();
    for (auto& l : links_) {
        close_fd(l.client, false);
        close_fd(l.server, false);
    }
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
}

void fault_proxy::cut(bool reset) {
    cut_ = reset ? 2 : 1;
    char b = 0;
    [[maybe_unused]] auto n = ::write(wake_[1], &b, 1);
    while (cut_ != 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void fault_proxy::drop(link& l, bool reset) {
    close_fd(l.client, reset);
    close_fd(l.server, reset);
    l.client = l.server = -1;
}

void fault_proxy::loop() {
    std::vector<char> buf(64 * 1024);
    while (!stop_) {
        std::vector<pollfd> fds = {{listener_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
        for (const auto& l : links_) {
            fds.push_back({l.client, POLLIN, 0});
            fds.push_back({l.server, static_cast<short>(l.server >= 0 ? POLLIN : 0), 0});
        }
        if (::poll(fds.data(), fds.size(), 50) < 0) continue;
        if (fds[1].revents) {
            char drain[64];
            [[maybe_unused]] auto n = ::read(wake_[0], drain, sizeof drain);
        }
        if (int how = cut_.load(); how != 0) {
            for (auto& l : links_)
                drop(l, how == 2);
            links_.clear();
            cut_ = 0;
            continue;
        }
        if (fds[0].revents & POLLIN) {
            int client = ::accept(listener_, nullptr, nullptr);
            if (client >= 0) {
                ++accepted_;
                mode m = mode_;
                if (m == mode::refuse) {
                    ::close(client);
                } else if (m == mode::pass) {
                    int server = connect_loopback(target_);
                    if (server < 0)
                        ::close(client);
                    else
                        links_.push_back({client, server, m});
                } else {
                    links_.push_back({client, -1, m});
                }
            }
        }
        for (std::size_t i = 0; i < links_.size() && 2 + 2 * i + 1 < fds.size(); ++i) {
            auto& l = links_[i];
            if (fds[2 + 2 * i].fd != l.client) break;  // links changed: next round
            if (fds[2 + 2 * i].revents) {
                auto n = ::recv(l.client, buf.data(), buf.size(), 0);
                if (n <= 0) {
                    drop(l, false);
                } else if (l.fault == mode::close_at_first || l.fault == mode::reset_at_first) {
                    drop(l, l.fault == mode::reset_at_first);
                } else if (l.fault == mode::pass &&
                           !send_all(l.server, buf.data(), static_cast<std::size_t>(n))) {
                    drop(l, false);
                }
            }
            if (l.server >= 0 && fds[2 + 2 * i + 1].revents) {
                auto n = ::recv(l.server, buf.data(), buf.size(), 0);
                if (n <= 0 || !send_all(l.client, buf.data(), static_cast<std::size_t>(n)))
                    drop(l, false);
            }
        }
        links_.erase(std::remove_if(links_.begin(), links_.end(),
                                    [](const link& l) { return l.client < 0; }),
                     links_.end());
    }
}

}  // namespace rategate::test
