// SPEC §2 `identity`: where the user id comes from (a header or a verified JWT) and whose
// forwarding headers are believed for the client IP.
#include "config/sections.hpp"

#include <cstdlib>

namespace rategate::config::detail {

namespace {

std::optional<cidr> parse_cidr(const std::string& text) {
    cidr out;
    out.text = text;
    auto slash = text.find('/');
    std::string addr = text.substr(0, slash);
    if (!is_ip_literal(addr, &out.bytes)) return std::nullopt;
    int max = static_cast<int>(out.bytes.size() * 8);
    out.prefix = max;
    if (slash != std::string::npos) {
        auto p = text.substr(slash + 1);
        if (p.empty() || p.size() > 3 || !std::all_of(p.begin(), p.end(), ::isdigit))
            return std::nullopt;
        out.prefix = std::stoi(p);
        if (out.prefix > max) return std::nullopt;
    }
    return out;
}

void read_jwt(const json& j, const std::string& path, checker& c, jwt_config& out) {
    object_reader o(j, path, c);
    if (auto h = read_string(o.get("header"), o.path("header"), c)) {
        if (!is_token(*h))
            c.fail(o.path("header"), "\"" + *h + "\" is not a valid header name");
        else
            out.header = *h;
    }
    if (auto v = read_string(o.get("claim"), o.path("claim"), c)) out.claim = *v;
    auto algs_path = o.path("algorithms");
    bool wants_hmac = false, wants_keys = false;
    if (auto* a = o.get("algorithms", true)) {
        if (!a->is_array() || a->empty()) {
            c.fail(algs_path, "expected a non-empty array such as [\"RS256\", \"ES256\"]");
        } else {
            static const std::set<std::string> known{"HS256", "HS384", "HS512", "RS256", "RS384",
                                                     "RS512", "ES256", "ES384", "ES512"};
            for (std::size_t i = 0; i < a->size(); ++i) {
                auto v = read_string(&(*a)[i], element(algs_path, i), c);
                if (!v) continue;
                if (!known.count(*v)) {
                    c.fail(element(algs_path, i), "unsupported algorithm \"" + *v +
                                                      "\" (HS256/384/512, RS256/384/512, "
                                                      "ES256/384/512; never none)");
                    continue;
                }
                (v->starts_with("HS") ? wants_hmac : wants_keys) = true;
                out.algorithms.push_back(*v);
            }
        }
    }
    auto keys_path = o.path("public_keys");
    if (auto* k = o.get("public_keys")) {
        if (!k->is_array()) {
            c.fail(keys_path, "expected an array of PEM file paths");
        } else {
            for (std::size_t i = 0; i < k->size(); ++i) {
                std::string pem;
                if (auto p = read_file_path(&(*k)[i], element(keys_path, i), c, &pem)) {
                    if (pem.find("-----BEGIN PUBLIC KEY-----") == std::string::npos)
                        c.fail(element(keys_path, i), "\"" + *p + "\" is not a PEM public key");
                    out.public_key_files.push_back(*p);
                    out.public_key_pems.push_back(std::move(pem));
                }
            }
        }
    }
    if (auto v = read_string(o.get("hmac_secret_env"), o.path("hmac_secret_env"), c)) {
        out.hmac_secret_env = *v;
        const char* secret = std::getenv(v->c_str());
        if (!secret || !*secret)
            c.fail(o.path("hmac_secret_env"), "environment variable " + *v + " is not set");
        else
            out.hmac_secret = secret;
    }
    if (wants_hmac && out.hmac_secret_env.empty())
        c.fail(o.path("hmac_secret_env"), "required by the HS algorithms listed");
    if (wants_keys && out.public_key_pems.empty() && !o.get("public_keys"))
        c.fail(keys_path, "required by the RS/ES algorithms listed");
    if (auto v = read_string(o.get("issuer"), o.path("issuer"), c)) out.issuer = *v;
    if (auto v = read_string(o.get("audience"), o.path("audience"), c)) out.audience = *v;
    if (auto v = read_duration(o.get("leeway"), o.path("leeway"), c)) out.leeway = *v;
    o.finish();
}

}  // namespace

void read_identity(const json& j, const std::string& path, checker& c, identity_config& out) {
    object_reader o(j, path, c);
    if (auto* u = o.get("user")) {
        object_reader ou(*u, o.path("user"), c);
        auto* jwt = ou.get("jwt");
        if (auto h = read_string(ou.get("header", !jwt), ou.path("header"), c)) {
            if (jwt)
                c.fail(ou.path("header"), "give either \"header\" or \"jwt\", not both");
            else if (!is_token(*h))
                c.fail(ou.path("header"), "\"" + *h + "\" is not a valid header name");
            else
                out.user_header = *h;
        }
        if (jwt) {
            jwt_config jc;
            read_jwt(*jwt, ou.path("jwt"), c, jc);
            out.jwt = std::move(jc);
        }
        ou.finish();
    }
    if (auto* ip = o.get("client_ip")) {
        object_reader oi(*ip, o.path("client_ip"), c);
        auto tp_path = oi.path("trusted_proxies");
        if (auto* tp = oi.get("trusted_proxies")) {
            if (!tp->is_array()) {
                c.fail(tp_path,
                       std::string("expected an array of CIDR blocks, got ") + type_name(*tp));
            } else {
                for (std::size_t i = 0; i < tp->size(); ++i) {
                    auto s = read_string(&(*tp)[i], element(tp_path, i), c);
                    if (!s) continue;
                    if (auto block = parse_cidr(*s))
                        out.trusted_proxies.push_back(*block);
                    else
                        c.fail(element(tp_path, i),
                               "\"" + *s + "\" is not a CIDR block such as 10.0.0.0/8");
                }
            }
        }
        if (auto h = read_string(oi.get("header"), oi.path("header"), c)) {
            if (!is_token(*h))
                c.fail(oi.path("header"), "\"" + *h + "\" is not a valid header name");
            else
                out.client_ip_header = *h;
        }
        if (auto n = read_int(oi.get("trusted_hops"), oi.path("trusted_hops"), c, 1, 64))
            out.trusted_hops = static_cast<unsigned>(*n);
        oi.finish();
    }
    o.finish();
}

}  // namespace rategate::config::detail
