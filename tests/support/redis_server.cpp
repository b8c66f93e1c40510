#include "tests/support/redis_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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

}  // namespace rategate::test
