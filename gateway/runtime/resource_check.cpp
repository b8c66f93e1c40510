#include "gateway/runtime/resource_check.hpp"

#include <exception>

#include "gateway/identity/jwt_verifier.hpp"
#include "gateway/proxy/tls.hpp"

namespace rategate::gateway {

std::vector<std::string> check_resources(const config::config& cfg, bool listener_tls) {
    std::vector<std::string> problems;
    // `prefix` + the error: the TLS builders name their field ("tls.ca: ...") themselves.
    auto attempt = [&problems](const std::string& prefix, auto&& build) {
        try {
            build();
        } catch (const std::exception& e) {
            problems.push_back(prefix + e.what());
        }
    };
    if (cfg.tls && listener_tls) attempt("", [&] { make_server_tls(*cfg.tls, cfg.http2.enabled); });
    // An "h2" upstream speaks TLS with the defaults when it has no tls block (upstream_pool).
    for (const auto& [name, u] : cfg.upstreams)
        if (u.tls || u.protocol == config::upstream_protocol::h2)
            attempt("upstreams." + name + ".",
                    [&] { make_client_tls(u.tls.value_or(config::tls_client_config{})); });
    if (const auto& j = cfg.identity.jwt)
        attempt("identity.user.jwt: ", [&] {
            identity::jwt_settings s;
            s.algorithms = j->algorithms;
            s.public_key_pems = j->public_key_pems;
            s.hmac_secret = j->hmac_secret;
            identity::jwt_verifier v(std::move(s));
        });
    return problems;
}

}  // namespace rategate::gateway
