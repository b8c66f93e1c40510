#include <doctest/doctest.h>
#include <jwt.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gateway/identity/jwt_verifier.hpp"

using namespace rategate::gateway::identity;

namespace {

// Keys are made at test time, never committed.
struct key_pair {
    std::string private_pem, public_pem;
};

std::string bio_text(BIO* b) {
    char* data = nullptr;
    long n = BIO_get_mem_data(b, &data);
    return std::string(data, static_cast<std::size_t>(n));
}

key_pair make_keys(bool rsa) {
    EVP_PKEY* k = rsa ? EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", static_cast<size_t>(2048))
                      : EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
    REQUIRE(k);
    BIO* priv = BIO_new(BIO_s_mem());
    BIO* pub = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(priv, k, nullptr, nullptr, 0, nullptr, nullptr);
    PEM_write_bio_PUBKEY(pub, k);
    key_pair out{bio_text(priv), bio_text(pub)};
    BIO_free(priv);
    BIO_free(pub);
    EVP_PKEY_free(k);
    return out;
}

const key_pair& rsa() {
    static key_pair k = make_keys(true);
    return k;
}
const key_pair& ec() {
    static key_pair k = make_keys(false);
    return k;
}
const std::string secret = "a-shared-hmac-secret-of-32-bytes!";
constexpr std::int64_t now = 1'800'000'000;

// A token signed by libjwt with `alg` and `key`, claims as JSON, extra header fields as JSON.
std::string sign(jwt_alg_t alg, const std::string& key, const std::string& claims,
                 const std::string& headers = "") {
    jwt_t* j = nullptr;
    jwt_new(&j);
    jwt_add_grants_json(j, claims.c_str());
    if (!headers.empty()) jwt_add_headers_json(j, headers.c_str());
    jwt_set_alg(j, alg, key.empty() ? nullptr : reinterpret_cast<const unsigned char*>(key.data()),
                static_cast<int>(key.size()));
    char* s = jwt_encode_str(j);
    std::string out = s ? s : "";
    std::free(s);
    jwt_free(j);
    return out;
}

jwt_settings all_algorithms() {
    jwt_settings s;
    s.algorithms = {"HS256", "RS256", "ES256"};
    s.public_key_pems = {rsa().public_pem, ec().public_pem};
    s.hmac_secret = secret;
    return s;
}

}  // namespace

TEST_CASE("HS256, RS256 and ES256 tokens verify and give the claim as user id") {
    jwt_verifier v(all_algorithms());
    for (auto [alg, key] :
         {std::pair{JWT_ALG_HS256, secret}, std::pair{JWT_ALG_RS256, rsa().private_pem},
          std::pair{JWT_ALG_ES256, ec().private_pem}}) {
        auto t = sign(alg, key, R"({"sub":"alice","exp":1800000100})");
        CAPTURE(jwt_alg_str(alg));
        auto r = v.verify("Bearer " + t, now);
        CHECK(r.what == jwt_result::kind::valid);
        CHECK(r.user == "alice");
        CHECK(r.expires_s == 1'800'000'100);
        CHECK(v.verify("bearer   " + t + " ", now).user == "alice");  // scheme case-insensitive
    }
    auto r = v.verify("Bearer " + sign(JWT_ALG_HS256, secret, R"({"exp":1800000100})"), now);
    CHECK(r.what == jwt_result::kind::valid);  // no claim: the user is missing
    CHECK(r.user.empty());
}

TEST_CASE("no token: no Authorization, another scheme") {
    jwt_verifier v(all_algorithms());
    CHECK(v.verify("", now).what == jwt_result::kind::no_token);
    CHECK(v.verify("Basic YWxhZGRpbjpvcGVuc2VzYW1l", now).what == jwt_result::kind::no_token);
    CHECK(v.verify("Bearertoken", now).what == jwt_result::kind::no_token);
}

TEST_CASE("every failure is invalid") {
    jwt_verifier v(all_algorithms());
    auto good = sign(JWT_ALG_RS256, rsa().private_pem, R"({"sub":"alice"})");
    auto dot = good.find('.');
    SUBCASE("bad signature") {
        auto other = sign(JWT_ALG_RS256, rsa().private_pem, R"({"sub":"mallory"})");
        auto forged = good.substr(0, dot) +
                      other.substr(other.find('.'), other.rfind('.') - other.find('.')) +
                      good.substr(good.rfind('.'));
        CHECK(v.verify_token(forged, now).what == jwt_result::kind::invalid);
        auto t = sign(JWT_ALG_HS256, "another-secret-of-enough-length!!", R"({"sub":"a"})");
        CHECK(v.verify_token(t, now).reason == "bad signature");
    }
    SUBCASE("alg none, with or without a signature") {
        auto none = sign(JWT_ALG_NONE, "", R"({"sub":"alice"})");
        CHECK(v.verify_token(none, now).what == jwt_result::kind::invalid);
        CHECK(v.verify_token(none + "c2ln", now).what == jwt_result::kind::invalid);
    }
    SUBCASE("RS256 public key used as an HS256 secret (key confusion)") {
        auto t = sign(JWT_ALG_HS256, rsa().public_pem, R"({"sub":"alice"})");
        CHECK(v.verify_token(t, now).what == jwt_result::kind::invalid);
        jwt_settings rs_only;
        rs_only.algorithms = {"RS256"};
        rs_only.public_key_pems = {rsa().public_pem};
        jwt_verifier only(rs_only);
        CHECK(only.verify_token(t, now).reason == "algorithm HS256 not allowed");
        CHECK(only.verify_token(good, now).what == jwt_result::kind::valid);
    }
    SUBCASE("an EC key never verifies RS256 and the other way round") {
        jwt_settings s;
        s.algorithms = {"RS256", "ES256"};
        s.public_key_pems = {ec().public_pem};
        jwt_verifier only_ec(s);
        CHECK(only_ec.verify_token(good, now).what == jwt_result::kind::invalid);
    }
    SUBCASE("exp and nbf with leeway") {
        auto expired = sign(JWT_ALG_HS256, secret, R"({"sub":"a","exp":1799999990})");
        CHECK(v.verify_token(expired, now).reason == "token expired");
        auto early = sign(JWT_ALG_HS256, secret, R"({"sub":"a","nbf":1800000010})");
        CHECK(v.verify_token(early, now).reason == "token not yet valid");
        auto s = all_algorithms();
        s.leeway = std::chrono::seconds(30);
        jwt_verifier lenient(s);
        CHECK(lenient.verify_token(expired, now).what == jwt_result::kind::valid);
        CHECK(lenient.verify_token(early, now).what == jwt_result::kind::valid);
        CHECK(
            v.verify_token(sign(JWT_ALG_HS256, secret, R"({"sub":"a","exp":"soon"})"), now).what ==
            jwt_result::kind::invalid);
    }
    SUBCASE("iss and aud are required when configured") {
        auto s = all_algorithms();
        s.issuer = "https://issuer.example";
        s.audience = "rategate";
        jwt_verifier strict(s);
        auto ok = sign(JWT_ALG_HS256, secret,
                       R"({"sub":"a","iss":"https://issuer.example","aud":["x","rategate"]})");
        CHECK(strict.verify_token(ok, now).what == jwt_result::kind::valid);
        CHECK(
            strict.verify_token(sign(JWT_ALG_HS256, secret, R"({"sub":"a","aud":"rategate"})"), now)
                .reason == "wrong issuer");
        CHECK(strict
                  .verify_token(sign(JWT_ALG_HS256, secret,
                                     R"({"sub":"a","iss":"https://issuer.example","aud":"other"})"),
                                now)
                  .reason == "wrong audience");
    }
    SUBCASE("malformed tokens") {
        std::vector<std::string> tokens{
            "",        "abc",   "a.b",
            "a.b.c",   "a..c",  "....",
            "a.b.c.d", "é.b.c", good.substr(0, good.size() - 3) + "!!!"};
        for (const auto& t : tokens) {
            CAPTURE(t);
            CHECK(v.verify_token(t, now).what == jwt_result::kind::invalid);
        }
    }
    SUBCASE("unknown crit header parameter") {
        auto t = sign(JWT_ALG_HS256, secret, R"({"sub":"a"})", R"({"crit":["exp-x"],"exp-x":1})");
        CHECK(v.verify_token(t, now).reason == "unsupported critical header parameter");
    }
    SUBCASE("DER-encoded ECDSA signature") {
        auto t = sign(JWT_ALG_ES256, ec().private_pem, R"({"sub":"a"})");
        // Re-encode the raw R||S signature (RFC 7518 §3.4) as DER, as some libraries wrongly do.
        std::string sig = t.substr(t.rfind('.') + 1);
        for (auto& c : sig)
            c = c == '-' ? '+' : c == '_' ? '/' : c;
        while (sig.size() % 4)
            sig += '=';
        unsigned char raw[96];
        int n = EVP_DecodeBlock(raw, reinterpret_cast<const unsigned char*>(sig.data()),
                                static_cast<int>(sig.size()));
        REQUIRE(n >= 64);
        ECDSA_SIG* es = ECDSA_SIG_new();
        ECDSA_SIG_set0(es, BN_bin2bn(raw, 32, nullptr), BN_bin2bn(raw + 32, 32, nullptr));
        unsigned char* der = nullptr;
        int dn = i2d_ECDSA_SIG(es, &der);
        ECDSA_SIG_free(es);
        std::string b64(static_cast<std::size_t>(4 * ((dn + 2) / 3)) + 1, '\0');
        int bn = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()), der, dn);
        OPENSSL_free(der);
        b64.resize(static_cast<std::size_t>(bn));
        while (!b64.empty() && b64.back() == '=')
            b64.pop_back();
        for (auto& c : b64)
            c = c == '+' ? '-' : c == '/' ? '_' : c;
        CHECK(v.verify_token(t, now).what == jwt_result::kind::valid);
        CHECK(v.verify_token(t.substr(0, t.rfind('.') + 1) + b64, now).what ==
              jwt_result::kind::invalid);
    }
}

TEST_CASE("bad settings are refused") {
    jwt_settings s;
    s.algorithms = {"none"};
    CHECK_THROWS_AS(jwt_verifier{s}, std::invalid_argument);
    s.algorithms = {"HS256"};
    CHECK_THROWS_AS(jwt_verifier{s}, std::invalid_argument);  // no secret
    s.algorithms = {"RS256"};
    s.public_key_pems = {"not a pem"};
    CHECK_THROWS_AS(jwt_verifier{s}, std::invalid_argument);
}
