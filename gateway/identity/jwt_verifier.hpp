// Verified JSON Web Token identity (SPEC §2 "User", RFC 7519, RFC 7515/7518, RFC 6750): the
// bearer token of a request is checked against an allow-list of algorithms, then its signature
// (libjwt over OpenSSL) with a key of the family its `alg` names — never the other family — then
// its claims; the configured claim is the user id. Sans-I/O; keys are loaded once per config.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rategate::gateway::identity {

/// What a route's user identity needs from a JWT (the config's `identity.user.jwt`).
struct jwt_settings {
    std::string claim = "sub";                 ///< the claim that is the user id
    std::vector<std::string> algorithms;       ///< allow-list, e.g. {"RS256", "ES256"}; no "none"
    std::vector<std::string> public_key_pems;  ///< PEM texts (RSA or EC public keys)
    std::string hmac_secret;                   ///< raw secret bytes for HS*; empty: none
    std::optional<std::string> issuer;         ///< required `iss` when set
    std::optional<std::string> audience;       ///< required in `aud` (string or array) when set
    std::chrono::seconds leeway{0};            ///< clock skew allowed for `exp` and `nbf`
};

/// The outcome for one request.
struct jwt_result {
    enum class kind {
        no_token,  ///< no Authorization, or another scheme: the user is missing
        valid,     ///< verified; `user` holds the claim, or is empty when the claim is absent
        invalid,   ///< presented and failed: 401 invalid_token, `reason` says why
    } what = kind::no_token;
    std::string user;
    std::string reason;
    std::int64_t expires_s = 0;  ///< `exp` (seconds since the epoch), 0 when none
};

/// Verifies bearer tokens for one config. Thread-safe after construction (const only).
class jwt_verifier {
  public:
    /// Loads the keys; throws std::invalid_argument naming the bad key or algorithm.
    explicit jwt_verifier(jwt_settings settings);

    /// Verifies the value of the Authorization header (`Bearer <token>`, scheme
    /// case-insensitive) at `now_s` (seconds since the Unix epoch).
    jwt_result verify(std::string_view authorization, std::int64_t now_s) const;

    /// Verifies a bare compact-serialised token (JWS, RFC 7515 §7.1).
    jwt_result verify_token(std::string_view token, std::int64_t now_s) const;

  private:
    enum class family { hmac, rsa, ec };
    jwt_settings settings_;
    std::vector<std::string> rsa_keys_, ec_keys_;  ///< PEM texts sorted by key type
};

/// The token of an Authorization value with the Bearer scheme (RFC 6750 §2.1), or nullopt.
std::optional<std::string_view> bearer_token(std::string_view authorization);

}  // namespace rategate::gateway::identity
