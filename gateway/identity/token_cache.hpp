// A per-event-loop cache of verified bearer tokens (SPEC §2 "User"): keyed by the token's
// SHA-256, holding the verified user until the token's `exp` (plus leeway). Bounded; no locks
// (one loop owns it); dropped with the runtime on reload, so keys and settings never go stale.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "gateway/identity/jwt_verifier.hpp"

namespace rategate::gateway::identity {

class token_cache {
  public:
    /// `verifier` must outlive the cache; at most `capacity` tokens are held.
    token_cache(const jwt_verifier& verifier, std::int64_t leeway_s, std::size_t capacity = 10000)
        : verifier_(verifier), leeway_s_(leeway_s), capacity_(capacity) {}

    /// The verifier's answer for an Authorization value at `now_s` (seconds since the epoch);
    /// a valid token's answer comes from the cache while it lasts. Only valid answers are
    /// cached, and a cached one is dropped once `exp` + leeway has passed.
    jwt_result verify(std::string_view authorization, std::int64_t now_s);

    std::size_t size() const { return entries_.size(); }

  private:
    struct digest_hash {
        std::size_t operator()(const std::array<unsigned char, 32>& d) const {
            std::size_t h;
            static_assert(sizeof h <= 32);
            std::memcpy(&h, d.data(), sizeof h);
            return h;
        }
    };
    struct entry {
        std::string user;
        std::int64_t expires_s;  ///< 0: no exp
    };
    const jwt_verifier& verifier_;
    std::int64_t leeway_s_;
    std::size_t capacity_;
    std::unordered_map<std::array<unsigned char, 32>, entry, digest_hash> entries_;
};

}  // namespace rategate::gateway::identity
