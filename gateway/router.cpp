#include "gateway/router.hpp"

#include <algorithm>
#include <cctype>

namespace rategate::gateway {

namespace {

bool host_matches(const config::route_config& r, std::string_view host) {
    if (!r.match.host) return true;
    // Drop the port; "[v6]:port" keeps its brackets in the route's host too.
    auto colon = host.rfind(':');
    if (colon != std::string_view::npos && host.find(']', colon) == std::string_view::npos)
        host = host.substr(0, colon);
    const auto& want = *r.match.host;
    return host.size() == want.size() &&
           std::equal(host.begin(), host.end(), want.begin(), [](char a, char b) {
               return std::tolower(static_cast<unsigned char>(a)) == b;
           });
}

bool method_matches(const config::route_config& r, std::string_view method) {
    if (r.match.methods.empty()) return true;
    return std::find(r.match.methods.begin(), r.match.methods.end(), method) !=
           r.match.methods.end();
}

}  // namespace

route_table::route_table(const config::config& cfg) {
    for (const auto& r : cfg.routes) {
        if (r.match.path) exact_.push_back({&r, *r.match.path});
        if (r.match.path_prefix) prefixes_.push_back({&r, *r.match.path_prefix});
    }
    std::stable_sort(prefixes_.begin(), prefixes_.end(),
                     [](const entry& a, const entry& b) { return a.key.size() > b.key.size(); });
}

const config::route_config* route_table::match(std::string_view method, std::string_view path,
                                               std::string_view host) const {
    for (const auto& e : exact_)
        if (path == e.key && method_matches(*e.route, method) && host_matches(*e.route, host))
            return e.route;
    for (const auto& e : prefixes_)
        if (path.substr(0, e.key.size()) == e.key && method_matches(*e.route, method) &&
            host_matches(*e.route, host))
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
