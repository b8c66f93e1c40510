// The readers of the config's sections, one file each (internal to config/). Each reads the
// object `j` at JSON path `path` into `out`, reporting every problem to `c`; load.cpp calls
// them in file order.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "config/config.hpp"
#include "config/json_reader.hpp"

namespace rategate::config::detail {

// server.cpp: the listener's own settings.
void read_limits(const json& j, const std::string& path, checker& c, limits_config& out);
void read_tls_server(const json& j, const std::string& path, checker& c, tls_server_config& out);
void read_http2(const json& j, const std::string& path, checker& c, http2_config& out);
void read_log(const json& j, const std::string& path, checker& c, log_config& out);

// redis.cpp
void read_redis(const json& j, const std::string& path, checker& c, redis_config& out);

// identity.cpp
void read_identity(const json& j, const std::string& path, checker& c, identity_config& out);

// upstreams.cpp
void read_upstream(const json& j, const std::string& path, checker& c, upstream_config& out);

// limiters.cpp
void read_limiter(const json& j, const std::string& path, checker& c, limiter_config& l);
/// The most one request may cost on an enforced layer's rule (permits) and the rule field that
/// says so, or nullopt when any cost can pass.
std::optional<std::pair<double, const char*>> rule_capacity(algorithm a, const rule_config& r);

// routes.cpp: `cfg` holds the upstreams and limiters already read (names are checked).
void read_route(const json& j, const std::string& path, checker& c, const config& cfg,
                route_config& r);

}  // namespace rategate::config::detail
