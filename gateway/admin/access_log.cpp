#include "gateway/admin/access_log.hpp"

#include <spdlog/async.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <nlohmann/json.hpp>

namespace rategate::gateway {

namespace {
std::shared_ptr<spdlog::logger> logger;
bool json_format = false;

// Lines are formatted on the event loop into a per-thread buffer and handed to the async logger
// in chunks (at 16 KiB, and by each loop's 250 ms ticker): one queue operation per chunk, not
// per request.
thread_local std::string pending;
constexpr std::size_t chunk_bytes = 16 * 1024;

// The time prefix, formatted once per second.
void append_time(std::string& out) {
    using namespace std::chrono;
    thread_local std::int64_t cached_second = -1;
    thread_local char cached[32];
    auto now = system_clock::now();
    auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count();
    auto second = ms / 1000;
    if (second != cached_second) {
        std::time_t t = static_cast<std::time_t>(second);
        std::tm tm{};
        gmtime_r(&t, &tm);
        std::strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
        cached_second = second;
    }
    out += cached;
    char frac[8];
    std::snprintf(frac, sizeof frac, ".%03dZ", static_cast<int>(ms % 1000));
    out += frac;
}
}  // namespace

void init_access_log(const config::log_config& cfg) {
    if (!cfg.access_log) return;
    json_format = cfg.access_format == config::log_config::format::json;
    spdlog::init_thread_pool(16384, 1);
    logger = spdlog::create_async_nb<spdlog::sinks::stdout_sink_mt>("access");
    // The time comes from spdlog; in JSON it becomes the first field of the object.
    logger->set_pattern("%v");  // lines carry their own time; a message is a chunk of lines
    logger->set_level(spdlog::level::info);
}

bool access_log_enabled() {
    return logger != nullptr;
}

void write_access_log(const access_entry& e) {
    if (!logger) return;
    if (json_format) {
        std::string time;
        append_time(time);
        nlohmann::json j = {{"time", time},
                            {"client", e.client},
                            {"route", e.route},
                            {"method", e.method},
                            {"path", e.path},
                            {"status", e.status},
                            {"bytes_in", e.bytes_in},
                            {"bytes_out", e.bytes_out},
                            {"duration_ms", e.duration_ms},
                            {"limit", e.limit_outcome},
                            {"limiter", e.limit_layer},
                            {"upstream", e.upstream},
                            {"request_id", e.request_id}};
        pending += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } else {
        append_time(pending);
        fmt::format_to(std::back_inserter(pending),
                       " {} {} {} {} {} {} {} {:.3f}ms limit={}:{} upstream={} id={}", e.client,
                       e.route.empty() ? "-" : e.route, e.method, e.path, e.status, e.bytes_in,
                       e.bytes_out, e.duration_ms, e.limit_outcome, e.limit_layer, e.upstream,
                       e.request_id);
    }
    pending += '\n';
    if (pending.size() >= chunk_bytes) flush_access_log();
}

void flush_access_log() {
    if (!logger || pending.empty()) return;
    pending.pop_back();  // the sink adds the last newline
    logger->info(pending);
    pending.clear();
}

void shutdown_access_log() {
    if (logger) logger->flush();
    logger.reset();
    spdlog::drop("access");
}

}  // namespace rategate::gateway
