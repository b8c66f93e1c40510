#include "gateway/limiting/identity.hpp"

#include "gateway/http/text.hpp"

namespace rategate::gateway::limiting {

request_identity assemble_identity(const config::config& cfg, const identity::settings& client_ip,
                                   const limiters::policy& policy, std::size_t route_index,
                                   const boost::beast::http::fields& fields,
                                   std::string_view peer_ip,
                                   const std::optional<std::string>& jwt_user) {
    request_identity who;
    // One walk over the field lines (in the order received) for the user header and the
    // forwarding header: a list of a few lines costs less than a tree lookup per name.
    const std::string_view user_header =
        cfg.identity.jwt ? std::string_view{} : cfg.identity.user_header;
    const std::string_view ip_header = cfg.identity.client_ip_header;
    std::vector<std::string_view> forwarding;  // every field line: one list (RFC 9110 §5.3)
    bool user_seen = false, user_repeated = false;
    for (const auto& f : fields) {
        auto name = std::string_view(f.name_string());
        if (name.size() == user_header.size() && h1::iequals(name, user_header)) {
            if (user_seen) {
                user_repeated = true;
            } else {
                user_seen = true;  // the first line, as fields::find
                if (!f.value().empty()) who.user = std::string_view(f.value());
            }
        }
        if (name.size() == ip_header.size() && h1::iequals(name, ip_header)) {
            forwarding.emplace_back(f.value());
        }
    }
    if (cfg.identity.jwt && jwt_user) who.user = *jwt_user;
    // With no forwarding line, or no hop trusted to vouch for one, the client is the peer,
    // canonical already: no parse per request.
    if (forwarding.empty() || !client_ip.trusts_any())
        who.ip = peer_ip;
    else
        who.ip = identity::resolve_client_ip(peer_ip, forwarding, client_ip);
    if (user_repeated)
        for (const auto* l : policy.chain(route_index))
            if (l->limiter->scope == config::scope_kind::user) who.repeated = user_header;
    for (auto name : policy.header_names(route_index)) {
        auto it = fields.find(name);
        who.headers.push_back({name, it == fields.end() ? std::nullopt
                                                        : std::optional<std::string_view>(
                                                              std::string_view(it->value()))});
        if (it != fields.end() && fields.count(name) > 1) who.repeated = name;
    }
    return who;
}

}  // namespace rategate::gateway::limiting
