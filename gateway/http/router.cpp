#include "gateway/http/router.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "gateway/http/text.hpp"

namespace rategate::gateway {

namespace {

using h1::iequals;

bool method_matches(const config::route_config& r, std::string_view method) {
    if (r.match.methods.empty()) return true;
    return std::find(r.match.methods.begin(), r.match.methods.end(), method) !=
           r.match.methods.end();
}

}  // namespace

std::pair<std::string_view, std::optional<std::uint16_t>> split_host_port(std::string_view host) {
    auto colon = host.rfind(':');
    if (colon == std::string_view::npos || host.find(']', colon) != std::string_view::npos)
        return {host, std::nullopt};
    auto digits = host.substr(colon + 1);
    std::uint16_t port = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty())
        return {host.substr(0, colon), std::nullopt};
    return {host.substr(0, colon), port};
}

route_table::route_table(const config::config& cfg) {
    for (const auto& r : cfg.routes) {
        entry e{&r, "", "", std::nullopt};
        if (r.match.host) {
            auto [name, port] = split_host_port(*r.match.host);
            e.host = std::string(name);
            if (e.host.size() > 1 && e.host.back() == '.') e.host.pop_back();  // as requests'
            e.port = port;
        }
        if (r.match.path) {
            e.key = *r.match.path;
            exact_.push_back(e);
        }
        if (r.match.path_prefix) {
            e.key = *r.match.path_prefix;
            prefixes_.push_back(e);
        }
    }
    auto hosted_first = [](const entry& a, const entry& b) {
        return !a.host.empty() && b.host.empty();
    };
    std::stable_sort(exact_.begin(), exact_.end(), hosted_first);
    std::stable_sort(prefixes_.begin(), prefixes_.end(), [&](const entry& a, const entry& b) {
        if (a.key.size() != b.key.size()) return a.key.size() > b.key.size();
        return hosted_first(a, b);
    });
}

bool route_table::host_matches(const entry& e, std::string_view name, std::uint16_t port) const {
    if (e.host.empty()) return true;
    if (e.port && *e.port != port) return false;
    return iequals(name, e.host);
}

const config::route_config* route_table::match(std::string_view method, std::string_view path,
                                               std::string_view host,
                                               std::uint16_t default_port) const {
    auto [name, port] = split_host_port(host);
    auto effective_port = port.value_or(default_port);
    for (const auto& e : exact_)
        if (path == e.key && method_matches(*e.route, method) &&
            host_matches(e, name, effective_port))
            return e.route;
    for (const auto& e : prefixes_)
        if (path.substr(0, e.key.size()) == e.key && method_matches(*e.route, method) &&
            host_matches(e, name, effective_port))
            return e.route;
    return nullptr;
}

std::string strip_path_prefix(std::string_view target, std::string_view prefix) {
    if (prefix.empty() || target.substr(0, prefix.size()) != prefix) return std::string(target);
    std::string rest(target.substr(prefix.size()));
    if (rest.empty() || rest.front() != '/') rest.insert(rest.begin(), '/');
    return rest;
}

}  // namespace rategate::gateway
