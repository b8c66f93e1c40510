#include "gateway/identity/jwt_verifier.hpp"

#include <jwt.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "gateway/http/text.hpp"

namespace rategate::gateway::identity {

namespace {

struct jwt_deleter {
    void operator()(jwt_t* j) const { jwt_free(j); }
};
using jwt_ptr = std::unique_ptr<jwt_t, jwt_deleter>;

struct free_deleter {
    void operator()(char* p) const { std::free(p); }
};

jwt_result invalid(std::string reason) {
    jwt_result r;
    r.what = jwt_result::kind::invalid;
    r.reason = std::move(reason);
    return r;
}

using h1::iequals;

// RFC 7515 §7.1 compact serialisation: three base64url parts (the signature may not be empty
// here: "none" is never accepted).
bool well_formed(std::string_view token) {
    if (token.empty() || token.size() > 16 * 1024) return false;
    int dots = 0;
    for (char c : token) {
        if (c == '.')
            ++dots;
        else if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '_'))
            return false;
    }
    return dots == 2 && token.front() != '.' && token.back() != '.';
}

// The key type of a PEM public key ("rsa" or "ec"), or throws.
int pem_key_type(const std::string& pem) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(
        BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
        bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr, &EVP_PKEY_free);
    if (!key) throw std::invalid_argument("not a PEM public key");
    return EVP_PKEY_get_base_id(key.get());
}

}  // namespace

std::optional<std::string_view> bearer_token(std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t'))
        v.remove_prefix(1);
    if (v.size() < 7 || !iequals(v.substr(0, 6), "Bearer") || (v[6] != ' ' && v[6] != '\t'))
        return std::nullopt;
    v.remove_prefix(7);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t'))
        v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t'))
        v.remove_suffix(1);
    return v;
}

jwt_verifier::jwt_verifier(jwt_settings settings) : settings_(std::move(settings)) {
    for (const auto& a : settings_.algorithms) {
        auto alg = jwt_str_alg(a.c_str());
        if (alg == JWT_ALG_INVAL || alg == JWT_ALG_NONE || a != jwt_alg_str(alg))
            throw std::invalid_argument("unsupported JWT algorithm \"" + a + "\"");
        if (a.starts_with("HS") && settings_.hmac_secret.empty())
            throw std::invalid_argument("algorithm " + a + " needs an HMAC secret");
    }
    for (std::size_t i = 0; i < settings_.public_key_pems.size(); ++i) {
        const auto& pem = settings_.public_key_pems[i];
        int type = 0;
        try {
            type = pem_key_type(pem);
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument("public key #" + std::to_string(i + 1) + ": " + e.what());
        }
        if (type == EVP_PKEY_RSA)
            rsa_keys_.push_back(pem);
        else if (type == EVP_PKEY_EC)
            ec_keys_.push_back(pem);
        else
            throw std::invalid_argument("public key #" + std::to_string(i + 1) +
                                        ": neither RSA nor EC");
    }
}

jwt_result jwt_verifier::verify(std::string_view authorization, std::int64_t now_s) const {
    auto token = bearer_token(authorization);
    if (!token) return {};
    return verify_token(*token, now_s);
}

jwt_result jwt_verifier::verify_token(std::string_view token_view, std::int64_t now_s) const {
    if (!well_formed(token_view)) return invalid("malformed token");
    std::string token(token_view);

    // 1. The header, unverified, only to learn `alg` and `crit` (RFC 7515 §4.1.1, §4.1.11).
    jwt_t* raw = nullptr;
    if (jwt_decode(&raw, token.c_str(), nullptr, 0) != 0 || !raw) return invalid("malformed token");
    jwt_ptr head(raw);
    // libjwt reports alg "none" for a token decoded without a key: read it from the header.
    std::unique_ptr<char, free_deleter> headers(jwt_get_headers_json(head.get(), nullptr));
    if (!headers) return invalid("malformed token header");
    auto h = nlohmann::json::parse(headers.get(), nullptr, false);
    if (!h.is_object()) return invalid("malformed token header");
    auto alg_it = h.find("alg");
    if (alg_it == h.end() || !alg_it->is_string()) return invalid("malformed token header");
    const std::string alg_name = alg_it->get<std::string>();
    const auto alg = jwt_str_alg(alg_name.c_str());
    if (alg == JWT_ALG_NONE || alg == JWT_ALG_INVAL || alg_name != jwt_alg_str(alg) ||
        std::find(settings_.algorithms.begin(), settings_.algorithms.end(), alg_name) ==
            settings_.algorithms.end())
        return invalid("algorithm " + alg_name + " not allowed");
    if (h.contains("crit")) return invalid("unsupported critical header parameter");

    // 2. The signature, with keys of the family `alg` names only (no RS/HS confusion).
    std::vector<std::string_view> keys;
    if (alg_name.starts_with("HS"))
        keys.push_back(settings_.hmac_secret);
    else if (alg_name.starts_with("RS"))
        keys.assign(rsa_keys_.begin(), rsa_keys_.end());
    else if (alg_name.starts_with("ES"))
        keys.assign(ec_keys_.begin(), ec_keys_.end());
    jwt_ptr verified;
    for (auto k : keys) {
        if (k.empty()) continue;
        jwt_t* v = nullptr;
        if (jwt_decode(&v, token.c_str(), reinterpret_cast<const unsigned char*>(k.data()),
                       static_cast<int>(k.size())) == 0 &&
            v) {
            verified.reset(v);
            break;
        }
        if (v) jwt_free(v);
    }
    if (!verified || jwt_get_alg(verified.get()) != alg) return invalid("bad signature");

    // 3. The claims (RFC 7519 §4.1).
    std::unique_ptr<char, free_deleter> grants(jwt_get_grants_json(verified.get(), nullptr));
    auto claims = nlohmann::json::parse(grants ? grants.get() : "{}", nullptr, false);
    if (!claims.is_object()) return invalid("malformed claims");
    const auto leeway = settings_.leeway.count();
    jwt_result r;
    if (auto it = claims.find("exp"); it != claims.end()) {
        if (!it->is_number()) return invalid("malformed exp");
        auto exp = it->get<double>();
        if (static_cast<double>(now_s) >= exp + static_cast<double>(leeway))
            return invalid("token expired");
        r.expires_s = static_cast<std::int64_t>(exp);
    }
    if (auto it = claims.find("nbf"); it != claims.end()) {
        if (!it->is_number()) return invalid("malformed nbf");
        if (static_cast<double>(now_s + leeway) < it->get<double>())
            return invalid("token not yet valid");
    }
    if (settings_.issuer) {
        auto it = claims.find("iss");
        if (it == claims.end() || !it->is_string() || it->get<std::string>() != *settings_.issuer)
            return invalid("wrong issuer");
    }
    if (settings_.audience) {
        auto it = claims.find("aud");
        bool ok = false;
        if (it != claims.end() && it->is_string())
            ok = it->get<std::string>() == *settings_.audience;
        if (it != claims.end() && it->is_array())
            for (const auto& a : *it)
                ok = ok || (a.is_string() && a.get<std::string>() == *settings_.audience);
        if (!ok) return invalid("wrong audience");
    }
    r.what = jwt_result::kind::valid;
    if (auto it = claims.find(settings_.claim); it != claims.end()) {
        if (it->is_string())
            r.user = it->get<std::string>();
        else if (it->is_number_integer())
            r.user = it->dump();
    }
    return r;
}

}  // namespace rategate::gateway::identity
