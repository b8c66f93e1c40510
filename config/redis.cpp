// SPEC §2 `redis` and "Redis deployments": one url, a Sentinel set or a Cluster's seeds.
#include "config/sections.hpp"

#include <algorithm>
#include <boost/url/parse.hpp>

namespace rategate::config::detail {

namespace {

void read_sentinel(const json& j, const std::string& path, checker& c, sentinel_config& out) {
    object_reader o(j, path, c);
    if (auto v = read_string(o.get("master", true), o.path("master"), c)) {
        if (v->empty() || v->find_first_of(" \r\n") != std::string::npos)
            c.fail(o.path("master"), "expected the master's name as the sentinels know it");
        else
            out.master = *v;
    }
    auto nodes_path = o.path("nodes");
    if (const json* n = o.get("nodes", true)) {
        if (!n->is_array() || n->empty()) {
            c.fail(nodes_path, "expected a non-empty array of \"host:port\"");
        } else {
            for (std::size_t i = 0; i < n->size(); ++i)
                if (auto hp = read_host_port(&(*n)[i], element(nodes_path, i), c, false))
                    out.nodes.push_back(*hp);
        }
    }
    if (auto v = read_string(o.get("username"), o.path("username"), c)) out.username = *v;
    if (auto v = read_string(o.get("password"), o.path("password"), c)) out.password = *v;
    o.finish();
}

void read_cluster(const json& j, const std::string& path, checker& c, cluster_config& out) {
    object_reader o(j, path, c);
    auto nodes_path = o.path("nodes");
    if (const json* n = o.get("nodes", true)) {
        if (!n->is_array() || n->empty()) {
            c.fail(nodes_path, "expected a non-empty array of \"host:port\" seed nodes");
        } else {
            for (std::size_t i = 0; i < n->size(); ++i)
                if (auto hp = read_host_port(&(*n)[i], element(nodes_path, i), c, false))
                    out.nodes.push_back(*hp);
        }
    }
    o.finish();
}

}  // namespace

void read_redis(const json& j, const std::string& path, checker& c, redis_config& out) {
    object_reader o(j, path, c);
    const json* url_j = o.get("url");
    const json* sentinel_j = o.get("sentinel");
    const json* cluster_j = o.get("cluster");
    int deployments = (url_j ? 1 : 0) + (sentinel_j ? 1 : 0) + (cluster_j ? 1 : 0);
    if (deployments != 1 && o.valid())
        c.fail(path, "needs exactly one of \"url\", \"sentinel\" or \"cluster\"");
    if (cluster_j) {
        out.url.clear();
        out.host.clear();
        out.port = 0;
        out.over_limit_cache = 0;
        out.cluster.emplace();
        read_cluster(*cluster_j, o.path("cluster"), c, *out.cluster);
    }
    if (sentinel_j) {
        out.url.clear();
        out.host.clear();
        out.port = 0;
        out.sentinel.emplace();
        read_sentinel(*sentinel_j, o.path("sentinel"), c, *out.sentinel);
    }
    if (const json* db = o.get("db")) {
        if (!sentinel_j)
            c.fail(o.path("db"), "only applies beside \"sentinel\" (the url names the database)");
        else if (auto v = read_int(db, o.path("db"), c, 0, 9999))
            out.db = static_cast<int>(*v);
    }
    if (auto url = read_string(url_j, o.path("url"), c)) {
        auto parsed = boost::urls::parse_uri(*url);
        if (!parsed || parsed->scheme() != "redis" || parsed->host().empty()) {
            c.fail(o.path("url"),
                   "expected redis://[:password@]host:port/db, got \"" + *url + "\"");
        } else {
            out.url = *url;
            out.host = parsed->host_address();
            if (!out.host.empty() && out.host.front() == '[')
                out.host = out.host.substr(1, out.host.size() - 2);
            out.port = parsed->has_port() ? parsed->port_number() : 6379;
            if (parsed->has_password()) out.password = parsed->password();
            if (parsed->has_userinfo() && !parsed->user().empty()) out.username = parsed->user();
            std::string db = parsed->path();
            if (!db.empty() && db.front() == '/') db.erase(0, 1);
            if (!db.empty()) {
                if (db.size() > 4 || !std::all_of(db.begin(), db.end(), ::isdigit))
                    c.fail(o.path("url"), "database in \"" + *url + "\" must be a number");
                else
                    out.db = std::stoi(db);
            }
        }
    }
    // Beside any deployment, they override what the url says (SPEC §2).
    if (auto v = read_string(o.get("username"), o.path("username"), c)) out.username = *v;
    if (auto v = read_string(o.get("password"), o.path("password"), c)) out.password = *v;
    if (auto v =
            read_int(o.get("connections_per_thread"), o.path("connections_per_thread"), c, 1, 64)) {
        if (cluster_j && *v != 1)
            c.fail(o.path("connections_per_thread"),
                   "must be 1 with \"cluster\": each event loop keeps one connection per master");
        else
            out.connections_per_thread = static_cast<int>(*v);
    }
    if (auto v = read_millis(o.get("command_timeout"), o.path("command_timeout"), c))
        out.command_timeout = *v;
    if (auto v = read_string(o.get("key_prefix"), o.path("key_prefix"), c, true)) {
        if (cluster_j && v->find_first_of("{}") != std::string::npos)
            c.fail(o.path("key_prefix"),
                   "must not hold '{' or '}' with \"cluster\": the braces of the keys are the "
                   "hash tags that spread the counters over the masters");
        else
            out.key_prefix = *v;
    }
    if (auto v = read_enum<redis_config::clock_source>(
            o.get("clock"), o.path("clock"), c,
            {{"redis", redis_config::clock_source::redis},
             {"gateway", redis_config::clock_source::gateway}}))
        out.clock = *v;
    if (auto v =
            read_int(o.get("over_limit_cache"), o.path("over_limit_cache"), c, 0, 10'000'000)) {
        if (cluster_j && *v != 0)
            c.fail(o.path("over_limit_cache"),
                   "must be 0 with \"cluster\": a refund can give back quota that a cached "
                   "refusal would still hold, so the cache is off there");
        else
            out.over_limit_cache = static_cast<std::size_t>(*v);
    }
    o.finish();
}

}  // namespace rategate::config::detail
