// The interface the request path decides chains through (gateway/limiting/pipeline.cpp): the
// in-process store (limiters/local/local_backend.hpp) or Redis — one server or the master
// Sentinel names (limiters/redis/redis_backend.hpp). The request path does not know which.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <system_error>
#include <vector>

#include "limiters/chain.hpp"
#include "limiters/clock.hpp"
#include "limiters/local/local_store.hpp"

namespace rategate::limiters {

class backend {
  public:
    /// One decision.
    struct answer {
        std::error_code ec;          ///< the store could not decide: the route's on_redis_error
        chain_decision decision;     ///< when !ec
        decided_state state;         ///< the deciding layer's state of a rejection, if asked for
        double clock_offset_us = 0;  ///< the limiter clock minus the local wall clock (µs)
        double decided_at_us = 0;    ///< the limiter clock's time of the decision (µs)
        /// One record per layer that went with a lease ask, chain order (SPEC §2 `sync`).
        std::vector<lease_grant> grants;
    };

    virtual ~backend() = default;

    /// Decides one request of `cost` permits over `refs` (chain order), all or nothing, at the
    /// time `at` reads when the decision is made (a batching backend reads it when the batch
    /// is sent; clock "redis" reads Redis TIME instead). `want_state`: report the deciding
    /// layer's state if the request is rejected. `refs` and `at` must stay alive until the
    /// awaitable completes.
    virtual boost::asio::awaitable<answer> decide(const std::vector<layer_ref>& refs, double cost,
                                                  const clock& at, bool want_state) = 0;

    /// Gives the unused permits of idle leases back to their counters (SPEC §2 `sync`): one
    /// give-back script call (per slot on a Cluster). The specs must stay alive until it
    /// completes; the backend itself is not touched once the call is sent. Fails (the permits
    /// are then dropped, as if expired) where the store takes no leases.
    virtual boost::asio::awaitable<std::error_code> give_back(std::vector<lease_return> items) {
        (void)items;
        co_return std::make_error_code(std::errc::operation_not_supported);
    }

    /// True when layers may go with a lease ask (layer_ref::lease): the store then takes
    /// leases as decide_chain says and answers their grants. False: every layer is exact.
    virtual bool leases() const { return false; }

    /// True when the store can decide now (/readyz; on_redis_error "local" goes local at once
    /// when it cannot).
    virtual bool ready() const = 0;

    /// Changes whenever the store behind may have lost or changed state (a reconnect, a
    /// failover): what was learned from it before, such as the over-limit cache's entries, is
    /// no longer known to hold. 0 for a store that cannot change behind the gateway's back.
    virtual std::uint64_t epoch() const { return 0; }
};

}  // namespace rategate::limiters
