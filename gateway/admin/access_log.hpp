// The access log (SPEC §5): one line per request, text or JSON, through an asynchronous spdlog
// logger so that writing never blocks an event loop (a full queue drops the oldest chunk).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace rategate::gateway {

/// One request as the access log records it.
struct access_entry {
    std::string_view client;        ///< peer address
    std::string_view route;         ///< "" when no route matched
    std::string_view method, path;  ///< path without the query string
    unsigned status = 0;
    std::uint64_t bytes_in = 0, bytes_out = 0;  ///< body bytes
    double duration_ms = 0;
    std::string_view limit_outcome =
        "-";  ///< allowed, limited, delayed, denied, error, shadow_limited, -
    std::string_view limit_layer = "-";  ///< the deciding or most restrictive limiter
    std::string_view upstream = "-";     ///< target host:port
    std::string_view request_id = "-";
};

/// Creates the access logger (stdout) from the config's log section; no-op when disabled.
void init_access_log(const config::log_config& cfg);
bool access_log_enabled();
void write_access_log(const access_entry& e);
/// Hands this thread's buffered lines to the logger (each event loop calls it every 250 ms and
/// when it ends).
void flush_access_log();
void shutdown_access_log();

}  // namespace rategate::gateway
