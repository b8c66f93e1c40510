#include "gateway/runtime/reload.hpp"

#include <signal.h>
#include <sys/stat.h>

#include <spdlog/spdlog.h>
#include <chrono>
#include <iostream>
#include <memory>

#include "config/config.hpp"
#include "gateway/admin/access_log.hpp"
#include "gateway/runtime/resource_check.hpp"
#include "gateway/runtime/server.hpp"

namespace rategate::gateway {

int serve(const std::string& file, const std::string& log_level) {
    std::shared_ptr<const config::config> cfg;
    try {
        cfg = config::load_config(file);
    } catch (const config::config_errors& e) {
        std::cerr << e.what();
        return 1;
    }
    if (auto problems = check_resources(*cfg); !problems.empty()) {
        for (const auto& p : problems)
            std::cerr << file << ": " << p << "\n";
        return 1;
    }
    // Signals are taken synchronously by the main thread; no other thread may ever see them, so
    // they are blocked before the first thread starts (the access log's is the first): a thread
    // that left SIGHUP unblocked would take a SIGHUP sent while the main thread is not waiting
    // (at startup, during a reload) and the default action would end the process.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    spdlog::set_level(spdlog::level::from_str(log_level.empty() ? cfg->log.level : log_level));
    init_access_log(cfg->log);

    std::unique_ptr<server> srv;
    try {
        srv = std::make_unique<server>(cfg);
    } catch (const std::exception& e) {
        spdlog::critical("{}", e.what());
        return 1;
    }
    srv->start();
    spdlog::info("rategate listening on {} with {} event loops, {} routes", cfg->listen.to_string(),
                 srv->thread_count(), cfg->routes.size());
    // SIGHUP, or a change of the file (polled every second), reloads: the new file is validated
    // first; if it is invalid, the old config keeps serving and every error is logged.
    auto stamp = [&file] {
        struct stat st {};
        if (::stat(file.c_str(), &st) != 0) return std::string();
        return std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
               std::to_string(st.st_size) + ":" + std::to_string(st.st_ino);
    };
    auto seen = stamp();
    auto reload = [&](const char* why) {
        seen = stamp();
        try {
            auto next = config::load_config(file);
            // Resources the loader cannot judge are built first: one that fails would fail
            // every event loop's install. A listener pair that fails keeps the previous pair
            // (SPEC §3) where there is one.
            auto problems = check_resources(*next, !srv->serves_tls());
            if (!problems.empty()) {
                srv->reload_failed();
                spdlog::error("{}: config reload refused, the previous config keeps serving:", why);
                for (const auto& p : problems)
                    spdlog::error("{}: {}", file, p);
                return;
            }
            srv->reload(std::move(next));
        } catch (const config::config_errors& e) {
            srv->reload_failed();
            spdlog::error("{}: config reload refused, the previous config keeps serving:", why);
            for (const auto& err : e.errors())
                spdlog::error("{}: {}: {}", e.file(), err.path, err.message);
        }
    };
    for (;;) {
        // With threads: 1 the event loop runs on this thread meanwhile (server::wait_signal).
        int sig = srv->wait_signal(signals, std::chrono::seconds(1));
        if (sig < 0) {
            if (stamp() != seen) reload("config file changed");
            continue;
        }
        if (sig == SIGHUP) {
            reload("SIGHUP");
            continue;
        }
        spdlog::info("{} received: draining connections", sig == SIGINT ? "SIGINT" : "SIGTERM");
        srv->stop(std::chrono::seconds(10));
        shutdown_access_log();
        spdlog::info("stopped");
        return 0;
    }
}

}  // namespace rategate::gateway
