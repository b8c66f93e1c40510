// SPEC §2 `upstreams.NAME`: targets, timeouts, the idle pool and TLS to the targets.
#include "config/sections.hpp"

namespace rategate::config::detail {

namespace {

void read_tls_client(const json& j, const std::string& path, checker& c, tls_client_config& out) {
    object_reader o(j, path, c);
    if (auto p = read_file_path(o.get("ca"), o.path("ca"), c)) out.ca_file = *p;
    if (auto v = read_string(o.get("server_name"), o.path("server_name"), c)) {
        if (!is_hostname(*v) && !is_ip_literal(*v))
            c.fail(o.path("server_name"), "\"" + *v + "\" is not a host name");
        else
            out.server_name = *v;
    }
    if (auto v = read_bool(o.get("verify"), o.path("verify"), c)) out.verify = *v;
    o.finish();
}

}  // namespace

void read_upstream(const json& j, const std::string& path, checker& c, upstream_config& out) {
    object_reader o(j, path, c);
    auto targets_path = o.path("targets");
    if (auto* t = o.get("targets", true)) {
        if (!t->is_array() || t->empty()) {
            c.fail(targets_path, "expected a non-empty array of \"host:port\"");
        } else {
            for (std::size_t i = 0; i < t->size(); ++i)
                if (auto hp = read_host_port(&(*t)[i], element(targets_path, i), c, false))
                    out.targets.push_back(*hp);
        }
    }
    if (auto v = read_millis(o.get("connect_timeout"), o.path("connect_timeout"), c))
        out.connect_timeout = *v;
    if (auto v = read_millis(o.get("response_timeout"), o.path("response_timeout"), c))
        out.response_timeout = *v;
    if (auto v =
            read_int(o.get("max_idle_per_target"), o.path("max_idle_per_target"), c, 0, 100000))
        out.max_idle_per_target = static_cast<std::size_t>(*v);
    if (auto* t = o.get("tls")) {
        tls_client_config tc;
        read_tls_client(*t, o.path("tls"), c, tc);
        out.tls = tc;
    }
    if (auto v = read_enum<upstream_protocol>(o.get("protocol"), o.path("protocol"), c,
                                              {{"http/1.1", upstream_protocol::http1},
                                               {"h2", upstream_protocol::h2},
                                               {"h2c", upstream_protocol::h2c}}))
        out.protocol = *v;
    o.finish();
}

}  // namespace rategate::config::detail
