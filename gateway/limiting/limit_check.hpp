// Per-event-loop rate-limit checks of the request path (SPEC §2–§3): identity → the chain's
// keys (limiters/policy.hpp) → the over-limit cache or one backend call (limiters/backend.hpp:
// Redis, whichever deployment, or in-process) → the outcome, applying the route's
// on_redis_error policy (allow, deny, or the in-process twin) when Redis fails, and shaping
// (delay layers). No socket here: tests/unit/test_limit_check.cpp drives it with a fake backend.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "config/config.hpp"
#include "gateway/admin/metrics.hpp"
#include "gateway/admin/top_keys.hpp"
#include "limiters/backend.hpp"
#include "limiters/local/local_backend.hpp"
#include "limiters/local/local_store.hpp"
#include "limiters/local/over_limit_cache.hpp"
#include "limiters/policy.hpp"

namespace rategate::gateway {

/// What to do with one request.
struct limit_outcome {
    enum class kind {
        pass,              ///< forward (after `decision.wait_us` when shaping)
        limited,           ///< answer with the route's on_limit status
        denied,            ///< on_missing_key "deny": 403
        invalid_identity,  ///< a user id or header value the route's limiters use is over
                           ///< limiters::max_identity_bytes: 400 `invalid_identity`
        unavailable,       ///< Redis failed and on_redis_error is "deny": 503
    } what = kind::pass;
    limiters::chain_decision decision;
    const limiters::policy::layer* decider = nullptr;  ///< the limiting / denying / invalid layer
    const limiters::policy::layer* header = nullptr;   ///< the most restrictive layer, for headers
    bool redis_failed = false;                         ///< Redis failed; the route's policy applied
    bool used_local = false;                           ///< decided by the in-process twin
    std::vector<const limiters::policy::layer*>
        layers;  ///< the chain as decided (skipped layers left out)
};

class limit_checker {
  public:
    /// `policy` and `local` are shared by every event loop; `cfg` must outlive the checker.
    /// `shared` (null without a `redis` section) is the loop's Redis backend and outlives the
    /// checker; when it fails, the route's on_redis_error applies (`local`: the in-process
    /// twin over `local`).
    limit_checker(const config::config& cfg, const limiters::policy& policy,
                  limiters::local_store& local, loop_metrics& metrics, limiters::backend* shared);
    ~limit_checker();

    /// Copies this loop's limited keys (GET /top) and cache size into `m`.
    void publish(loop_metrics& m) const;

    /// Decides one request of route `route_index` with `cost`.
    boost::asio::awaitable<limit_outcome> check(std::size_t route_index,
                                                const limiters::identity& who, double cost);

    /// True when Redis is configured and reachable.
    bool redis_ready() const;

    /// Layer keys with shaped requests held right now (bounded per key; see limit_check.cpp).
    std::size_t held_keys() const { return waiting_.size(); }

  private:
    const config::config& cfg_;
    const limiters::policy& policy_;
    limiters::local_backend local_;
    limiters::backend* shared_;
    limiters::wall_clock clock_;        ///< the limiter clock of the request path
    limiters::over_limit_cache cache_;  ///< exact answers to known rejections, this loop only
    std::uint64_t cache_epoch_ = 0;     ///< the backend's epoch the cache's entries are from
    boost::asio::awaitable<limit_outcome> decide(std::size_t route_index,
                                                 const limiters::identity& who, double cost);
    void count(const limit_outcome& o);

    loop_metrics& metrics_;
    admin::windowed_top top_;  ///< the layer keys this loop limited, per minute (GET /top)
    std::map<std::string, std::size_t> waiting_;  ///< shaped requests held, per layer key
};

}  // namespace rategate::gateway
