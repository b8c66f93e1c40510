#include "gateway/identity/token_cache.hpp"

#include <openssl/evp.h>

namespace rategate::gateway::identity {

jwt_result token_cache::verify(std::string_view authorization, std::int64_t now_s) {
    auto token = bearer_token(authorization);
    if (!token) return {};
    std::array<unsigned char, 32> digest{};
    unsigned int len = 0;
    EVP_Digest(token->data(), token->size(), digest.data(), &len, EVP_sha256(), nullptr);
    if (auto it = entries_.find(digest); it != entries_.end()) {
        if (it->second.expires_s == 0 || now_s < it->second.expires_s + leeway_s_) {
            jwt_result r;
            r.what = jwt_result::kind::valid;
            r.user = it->second.user;
            r.expires_s = it->second.expires_s;
            return r;
        }
        entries_.erase(it);
    }
    auto r = verifier_.verify_token(*token, now_s);
    if (r.what == jwt_result::kind::valid) {
        if (entries_.size() >= capacity_) entries_.clear();  // bounded: start over when full
        entries_.emplace(digest, entry{r.user, r.expires_s});
    }
    return r;
}

}  // namespace rategate::gateway::identity
