// SPEC §2 `routes[]`: match, upstream, limiter chain, cost and the answers on a limit.
#include "config/sections.hpp"
#include "limiters/chain.hpp"

#include <algorithm>
#include <sstream>

namespace rategate::config::detail {

namespace {

// The most limiters one route may list: the width of chain_decision::shadow_mask.
constexpr std::size_t max_route_limiters = limiters::max_chain_layers;

// A route whose cost exceeds an enforced layer's capacity could never pass (with or without
// `delay`). Shadow layers never reject and are not checked.
void check_cost(const route_config& r, const std::string& path, checker& c, const config& cfg) {
    for (const auto& name : r.limiters) {
        const auto& l = cfg.limiters.at(name);
        // Every layer, shadow included (it consumes too): the times a request of this cost
        // makes the rule compute must stay in range.
        if (auto problem = cost_span_problem(l, static_cast<double>(r.cost)))
            c.fail(path, "limiter \"" + name + "\" " + *problem);
        if (l.shadow) continue;
        for (std::size_t i = 0; i < l.rules.size(); ++i) {
            auto cap = rule_capacity(l.algo, l.rules[i]);
            // A rule whose field failed to load has already been reported.
            if (!cap || cap->first <= 0 || static_cast<double>(r.cost) <= cap->first) continue;
            std::ostringstream o;
            o << "cost " << r.cost << " exceeds limiter \"" << name << "\" (rules[" << i << "]."
              << cap->second << " = " << cap->first << "): no request could ever pass";
            c.fail(path, o.str());
            break;
        }
    }
}

// A route's `host`: a name or an address, optionally with a port ("api.example.com",
// "api.example.com:8443", "10.0.0.1", "[::1]:8080"). The router compares it whole, so a
// wildcard ("*.example.com") or a URL never matched, and a port it cannot read was ignored.
bool is_route_host(const std::string& h) {
    auto parts = split_host_port(h);
    if (!parts) return false;
    const bool name_ok =
        parts->bracketed ? parts->host.find(':') != std::string::npos && is_ip_literal(parts->host)
                         : is_hostname(parts->host);
    return name_ok && (!parts->port || port_number(*parts->port));
}

std::string upper(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), ::toupper);
    return s;
}

// "get" for "GET": a route that lists it matched no request (methods compare exactly).
bool standard_method_in_wrong_case(const std::string& m) {
    static const char* const standard[] = {"GET",     "HEAD",    "POST",  "PUT",  "DELETE",
                                           "CONNECT", "OPTIONS", "TRACE", "PATCH"};
    auto u = upper(m);
    return u != m && std::find(std::begin(standard), std::end(standard), u) != std::end(standard);
}

// A strip_prefix that no matched path starts with was never stripped, silently.
bool strip_can_apply(const route_match& m, const std::string& strip) {
    if (m.path && m.path->starts_with(strip)) return true;
    return m.path_prefix &&
           (m.path_prefix->starts_with(strip) || strip.starts_with(*m.path_prefix));
}

}  // namespace

void read_route(const json& j, const std::string& path, checker& c, const config& cfg,
                route_config& r) {
    object_reader o(j, path, c);
    if (auto v = read_string(o.get("name", true), o.path("name"), c)) r.name = *v;
    if (auto* m = o.get("match", true)) {
        object_reader om(*m, o.path("match"), c);
        auto path_field = [&](const char* key) -> std::optional<std::string> {
            auto v = read_string(om.get(key), om.path(key), c);
            if (v && v->front() != '/') {
                c.fail(om.path(key), "must start with \"/\"");
                return std::nullopt;
            }
            return v;
        };
        r.match.path = path_field("path");
        r.match.path_prefix = path_field("path_prefix");
        if (om.valid() && !m->contains("path") && !m->contains("path_prefix"))
            c.fail(o.path("match"), "needs \"path\" or \"path_prefix\"");
        auto methods_path = om.path("methods");
        if (auto* ms = om.get("methods")) {
            if (!ms->is_array()) {
                c.fail(methods_path,
                       std::string("expected an array of methods, got ") + type_name(*ms));
            } else {
                for (std::size_t i = 0; i < ms->size(); ++i) {
                    auto s = read_string(&(*ms)[i], element(methods_path, i), c);
                    if (s && is_token(*s) && standard_method_in_wrong_case(*s))
                        c.fail(element(methods_path, i),
                               "\"" + *s +
                                   "\" never matches: methods are case-sensitive (RFC "
                                   "9110 §9.1), write \"" +
                                   upper(*s) + "\"");
                    else if (s && is_token(*s))
                        r.match.methods.push_back(*s);
                    else if (s)
                        c.fail(element(methods_path, i), "\"" + *s + "\" is not an HTTP method");
                }
            }
        }
        if (auto h = read_string(om.get("host"), om.path("host"), c)) {
            std::string lower = *h;
            std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
            if (is_route_host(lower))
                r.match.host = lower;
            else
                c.fail(om.path("host"),
                       "expected a host name or address, optionally with :port "
                       "(no wildcards, scheme or path), got \"" +
                           *h + "\"");
        }
        om.finish();
    }
    if (auto v = read_string(o.get("upstream", true), o.path("upstream"), c)) {
        if (!cfg.upstreams.count(*v) && !cfg.upstreams.empty())
            c.fail(o.path("upstream"), "no upstream named \"" + *v + "\"");
        r.upstream = *v;
    }
    if (auto v = read_string(o.get("strip_prefix"), o.path("strip_prefix"), c)) {
        if (v->front() != '/')
            c.fail(o.path("strip_prefix"), "must start with \"/\"");
        else if ((r.match.path || r.match.path_prefix) && !strip_can_apply(r.match, *v))
            c.fail(o.path("strip_prefix"),
                   "\"" + *v + "\" begins no path this route matches: it would never be stripped");
        else
            r.strip_prefix = *v;
    }
    auto limiters_path = o.path("limiters");
    if (auto* ls = o.get("limiters")) {
        if (!ls->is_array()) {
            c.fail(limiters_path,
                   std::string("expected an array of limiter names, got ") + type_name(*ls));
        } else if (ls->size() > max_route_limiters) {
            // A decision reports its shadow layers as bits of a 32-bit mask
            // (chain_decision::shadow_mask): a 33rd layer has no bit.
            c.fail(limiters_path, "at most " + std::to_string(max_route_limiters) +
                                      " limiters per route, got " + std::to_string(ls->size()));
        } else {
            for (std::size_t i = 0; i < ls->size(); ++i) {
                auto s = read_string(&(*ls)[i], element(limiters_path, i), c);
                if (!s) continue;
                if (!cfg.limiters.count(*s))
                    c.fail(element(limiters_path, i), "no limiter named \"" + *s + "\"");
                else if (std::find(r.limiters.begin(), r.limiters.end(), *s) != r.limiters.end())
                    c.fail(element(limiters_path, i), "limiter \"" + *s + "\" is listed twice");
                else
                    r.limiters.push_back(*s);
            }
        }
    }
    if (auto v = read_int(o.get("cost"), o.path("cost"), c, 1, max_cost)) r.cost = *v;
    check_cost(r, o.path("cost"), c, cfg);
    if (auto* ol = o.get("on_limit")) {
        object_reader oo(*ol, o.path("on_limit"), c);
        if (auto v = read_int(oo.get("status"), oo.path("status"), c, 400, 599))
            r.on_limit_status = static_cast<int>(*v);
        if (auto v = read_string(oo.get("message"), oo.path("message"), c, true))
            r.on_limit_message = *v;
        oo.finish();
    }
    if (auto v = read_enum<redis_error_policy>(o.get("on_redis_error"), o.path("on_redis_error"), c,
                                               {{"allow", redis_error_policy::allow},
                                                {"deny", redis_error_policy::deny},
                                                {"local", redis_error_policy::local}}))
        r.on_redis_error = *v;
    if (auto v = read_enum<header_style>(o.get("headers"), o.path("headers"), c,
                                         {{"ietf", header_style::ietf},
                                          {"legacy", header_style::legacy},
                                          {"both", header_style::both},
                                          {"none", header_style::none}}))
        r.headers = *v;
    if (auto v = read_bool(o.get("websocket"), o.path("websocket"), c)) r.websocket = *v;
    o.finish();
}

}  // namespace rategate::config::detail
