#include "gateway/limiting/identity.hpp"

#include "gateway/identity/client_ip.hpp"

namespace rategate::gateway::limiting {

request_identity assemble_identity(const config::config& cfg, const limiters::policy& policy,
                                   std::size_t route_index,
                                   const boost::beast::http::fields& fields, std::string_view peer,
                                   const std::optional<std::string>& jwt_user) {
    request_identity who;
    if (cfg.identity.jwt) {
        if (jwt_user) who.user = *jwt_user;
    } else if (auto it = fields.find(cfg.identity.user_header);
               it != fields.end() && !it->value().empty()) {
        who.user = std::string_view(it->value());
    }
    std::vector<std::string_view> forwarding;  // every field line: one list (RFC 9110 §5.3)
    for (auto [it, end] = fields.equal_range(cfg.identity.client_ip_header); it != end; ++it)
        forwarding.emplace_back(it->value());
    who.ip = identity::resolve_client_ip(peer, forwarding, identity::settings::from(cfg.identity));
    for (auto name : policy.header_names(route_index)) {
        auto it = fields.find(name);
        who.headers.push_back({name, it == fields.end() ? std::nullopt
                                                        : std::optional<std::string_view>(
                                                              std::string_view(it->value()))});
    }
    return who;
}

}  // namespace rategate::gateway::limiting
