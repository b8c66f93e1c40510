#include "gateway/access_log.hpp"

#include <spdlog/async.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace rategate::gateway {

namespace {
std::shared_ptr<spdlog::logger> logger;
bool json_format = false;
}  // namespace

void init_access_log(const config::log_config& cfg) {
    if (!cfg.access_log) return;
    json_format = cfg.access_format == config::log_config::format::json;
    spdlog::init_thread_pool(16384, 1);
    logger = spdlog::create_async_nb<spdlog::sinks::stdout_sink_mt>("access");
    // The time comes from spdlog; in JSON it becomes the first field of the object.
    logger->set_pattern(json_format ? "{\"time\":\"%Y-%m-%dT%H:%M:%S.%e%z\",%v}"
                                    : "%Y-%m-%dT%H:%M:%S.%e%z %v");
    logger->set_level(spdlog::level::info);
}

bool access_log_enabled() {
    return logger != nullptr;
}

void write_access_log(const access_entry& e) {
    if (!logger) return;
    if (json_format) {
        nlohmann::json j = {{"client", e.client},       {"route", e.route},
                            {"method", e.method},       {"path", e.path},
                            {"status", e.status},       {"bytes_in", e.bytes_in},
                            {"bytes_out", e.bytes_out}, {"duration_ms", e.duration_ms},
                            {"limit", e.limit_outcome}, {"limiter", e.limit_layer},
                            {"upstream", e.upstream},   {"request_id", e.request_id}};
        auto text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        logger->info(
            std::string_view(text).substr(1, text.size() - 2));  // the pattern adds the braces
    } else {
        logger->info("{} {} {} {} {} {} {} {:.3f}ms limit={}:{} upstream={} id={}", e.client,
                     e.route.empty() ? "-" : e.route, e.method, e.path, e.status, e.bytes_in,
                     e.bytes_out, e.duration_ms, e.limit_outcome, e.limit_layer, e.upstream,
                     e.request_id);
    }
}

void shutdown_access_log() {
    if (logger) logger->flush();
    logger.reset();
    spdlog::drop("access");
}

}  // namespace rategate::gateway
