// SPEC §2, the listener's sections: `limits`, `tls`, `http2`, `log` (and host_port's text form).
#include "config/sections.hpp"

namespace rategate::config {

std::string host_port::to_string() const {
    if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
    return host + ":" + std::to_string(port);
}

namespace detail {

void read_limits(const json& j, const std::string& path, checker& c, limits_config& out) {
    object_reader o(j, path, c);
    // At most 8 MiB, Envoy's bound (max_request_headers_kb): the HTTP/1.1 parser's header limit
    // and HTTP/2's SETTINGS_MAX_HEADER_LIST_SIZE are 32-bit, and "4GiB" became a limit of 4
    // bytes there, every request a 400.
    if (auto v = read_size(o.get("max_header_bytes"), o.path("max_header_bytes"), c, 256)) {
        if (*v > 8 * 1024 * 1024)
            c.fail(o.path("max_header_bytes"), "must be at most 8MiB (8388608 bytes)");
        else
            out.max_header_bytes = static_cast<std::size_t>(*v);
    }
    if (auto v = read_size(o.get("max_body_bytes"), o.path("max_body_bytes"), c, 0))
        out.max_body_bytes = *v;
    if (auto v = read_millis(o.get("header_timeout"), o.path("header_timeout"), c))
        out.header_timeout = *v;
    if (auto v = read_millis(o.get("idle_timeout"), o.path("idle_timeout"), c))
        out.idle_timeout = *v;
    if (auto v = read_int(o.get("max_connections"), o.path("max_connections"), c, 1, 10'000'000))
        out.max_connections = static_cast<std::size_t>(*v);
    o.finish();
}

void read_tls_server(const json& j, const std::string& path, checker& c, tls_server_config& out) {
    object_reader o(j, path, c);
    if (auto p = read_file_path(o.get("cert", true), o.path("cert"), c)) out.cert_file = *p;
    if (auto p = read_file_path(o.get("key", true), o.path("key"), c)) out.key_file = *p;
    o.finish();
}

void read_http2(const json& j, const std::string& path, checker& c, http2_config& out) {
    object_reader o(j, path, c);
    if (auto v = read_bool(o.get("enabled"), o.path("enabled"), c)) out.enabled = *v;
    if (auto v = read_bool(o.get("h2c"), o.path("h2c"), c)) out.h2c = *v;
    // RFC 9113 §6.5.2: at least 100 streams is the recommendation, 2^31-1 the largest window.
    if (auto v = read_int(o.get("max_concurrent_streams"), o.path("max_concurrent_streams"), c, 1,
                          1'000'000))
        out.max_concurrent_streams = static_cast<std::uint32_t>(*v);
    if (auto v = read_size(o.get("initial_window_size"), o.path("initial_window_size"), c, 1)) {
        if (*v > 0x7fffffffu)
            c.fail(o.path("initial_window_size"), "exceeds 2^31-1 bytes (RFC 9113 §6.9.1)");
        else
            out.initial_window_size = static_cast<std::uint32_t>(*v);
    }
    if (auto v = read_int(o.get("max_resets_per_second"), o.path("max_resets_per_second"), c, 1,
                          1'000'000))
        out.max_resets_per_second = static_cast<std::uint32_t>(*v);
    if (out.h2c && !out.enabled)
        c.fail(o.path("h2c"), "h2c needs HTTP/2 enabled (http2.enabled is false)");
    o.finish();
}

void read_log(const json& j, const std::string& path, checker& c, log_config& out) {
    object_reader o(j, path, c);
    if (auto v = read_enum<std::string>(o.get("level"), o.path("level"), c,
                                        {{"trace", "trace"},
                                         {"debug", "debug"},
                                         {"info", "info"},
                                         {"warn", "warn"},
                                         {"error", "error"},
                                         {"off", "off"}}))
        out.level = *v;
    if (auto v = read_bool(o.get("access_log"), o.path("access_log"), c)) out.access_log = *v;
    if (auto v = read_enum<log_config::format>(
            o.get("format"), o.path("format"), c,
            {{"text", log_config::format::text}, {"json", log_config::format::json}}))
        out.access_format = *v;
    o.finish();
}

}  // namespace detail

}  // namespace rategate::config
