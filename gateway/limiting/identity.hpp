// A request's identity as the limiter scopes read it (SPEC §2 "Identity"), assembled in this one
// place from the request's fields before any key is computed: the user id (a verified JWT's
// claim, or the user header), the client IP (the peer, or the forwarding header walked behind
// trusted proxies: gateway/identity/client_ip.hpp) and the values of the route's header scopes.
// No callback reaches back into the parser: limiters/policy.hpp reads plain values.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "gateway/identity/client_ip.hpp"
#include "limiters/policy.hpp"

namespace rategate::gateway::limiting {

/// Who sent one request. Views into the request's fields and the verified JWT user, which must
/// outlive it; the client IP is its own.
struct request_identity {
    std::optional<std::string_view> user;         ///< user id, if any (never empty)
    std::string ip;                               ///< client IP, canonical text
    std::vector<limiters::header_value> headers;  ///< the route's header scopes, in
                                                  ///< policy::header_names order
    /// A field a limiter of the route takes its identity from (the user header, a header
    /// scope's) that came on more than one line; empty when none did. Such a request is a 400:
    /// the upstream may read another line than the one limited.
    std::string_view repeated;
    /// The identity as limiters::policy computes keys from it (views into this object).
    limiters::identity view() const { return {user, ip, headers}; }
};

/// The identity of a request to route `route_index` with header fields `fields` from the TCP
/// peer `peer_ip` (as a client IP: identity::canonical_ip of the peer, "" when it is none). With
/// `identity.user.jwt` the user is `jwt_user` (the verified token's claim) and the user header is
/// not read; otherwise the user header's first field line, when not empty. Header scopes take their
/// field's first line (empty counts); a user header (where a layer of the route has scope user) or
/// header scope on several lines is named in `repeated`. `client_ip` is
/// identity::settings::from(cfg.identity), made once per config.
request_identity assemble_identity(const config::config& cfg, const identity::settings& client_ip,
                                   const limiters::policy& policy, std::size_t route_index,
                                   const boost::beast::http::fields& fields,
                                   std::string_view peer_ip,
                                   const std::optional<std::string>& jwt_user);

}  // namespace rategate::gateway::limiting
