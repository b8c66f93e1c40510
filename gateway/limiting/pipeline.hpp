// The limiting pipeline of one event loop (SPEC §2–§3): a request's identity → its chain's keys
// (limiters/policy.hpp) → the over-limit cache or one backend call (limiters/backend.hpp: Redis
// in whichever deployment, or in-process) → one outcome (outcome.hpp), applying the route's
// on_redis_error (allow, deny, or the in-process twin) when Redis fails, and shaping (delay
// layers). Leased layers (SPEC §2 `sync`) are served from this loop's lease book where it can;
// the rest of the chain, and a lease when one is due, go in the same one call. The gateway runs it
// on the wall clock; `rategate replay` runs the same pipeline on the trace's clock. No socket here:
// tests/unit/test_pipeline.cpp drives it with a fake backend.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "gateway/admin/top_keys.hpp"
#include "gateway/limiting/outcome.hpp"
#include "limiters/backend.hpp"
#include "limiters/clock.hpp"
#include "limiters/lease_book.hpp"
#include "limiters/local/local_backend.hpp"
#include "limiters/local/local_store.hpp"
#include "limiters/local/over_limit_cache.hpp"
#include "limiters/policy.hpp"

namespace rategate::gateway {
struct loop_metrics;
}

namespace rategate::gateway::limiting {

class pipeline {
  public:
    /// How the pipeline treats a delay layer's wait.
    enum class shaping {
        wait,    ///< the gateway: hold the request on a timer, then forward (or decide again)
        report,  ///< replay: return the first decision with its wait, hold nothing
    };
    struct options {
        shaping delays = shaping::wait;
        /// Requests may cost more than their route's `cost` (replay traces carry their own):
        /// the over-limit cache then bounds debts by the largest cost seen.
        bool costs_beyond_routes = false;
    };

    /// `policy`, `local`, `metrics` and `clock` outlive the pipeline; `cfg` too. `shared` (null
    /// without a `redis` section) is the loop's Redis backend and outlives the pipeline; when it
    /// fails, the route's on_redis_error applies (`local`: the in-process twin over `local`).
    pipeline(const config::config& cfg, const limiters::policy& policy,
             limiters::local_store& local, loop_metrics& metrics, limiters::backend* shared,
             const limiters::clock& clock, options opts);
    pipeline(const config::config& cfg, const limiters::policy& policy,
             limiters::local_store& local, loop_metrics& metrics, limiters::backend* shared,
             const limiters::clock& clock)
        : pipeline(cfg, policy, local, metrics, shared, clock, options{}) {}
    ~pipeline();

    /// Decides one request of route `route_index` (config order) from `who` costing `cost`
    /// permits, at the pipeline's clock, and counts it in the metrics.
    boost::asio::awaitable<outcome> check(std::size_t route_index, const limiters::identity& who,
                                          double cost);

    /// Copies this loop's limited keys (GET /top) and cache size into `m`.
    void publish(loop_metrics& m) const;

    /// True when Redis is configured and reachable.
    bool redis_ready() const;

    /// A stop: gives every lease's unspent permits back to Redis now, idle or not, in one
    /// give-back call, and ends the idle sweep. Requests decided after it take no new sweep.
    boost::asio::awaitable<void> give_back_leases();

    /// Layer keys with shaped requests held right now (at most 1,024 requests per key).
    std::size_t held_keys() const { return waiting_.size(); }

  private:
    /// One decision of the shared backend over `refs` (chain order, `layers` parallel) with at
    /// least one leased layer: the leased layers from the lease book and, where a call is needed,
    /// the rest in one call (layers the lease serves left out of it). The answer's positions are
    /// the chain's.
    boost::asio::awaitable<limiters::backend::answer> decide_shared(
        std::size_t route_index, const std::vector<const limiters::policy::layer*>& layers,
        const std::vector<limiters::layer_ref>& refs, double cost, bool want_state);
    /// Adds what the lease book counted since the last call to the metrics.
    void count_leases();
    struct lease_sweeper;
    /// Every 250 ms while the book holds permits: gives idle leases back to Redis
    /// (lease_book::take_idle). Ends when nothing is held, or when the pipeline is gone.
    boost::asio::awaitable<void> sweep_leases(std::shared_ptr<lease_sweeper> s);

    const config::config& cfg_;
    const limiters::policy& policy_;
    limiters::local_backend local_;
    limiters::backend* shared_;
    const limiters::clock& clock_;
    options opts_;
    double cost_ceiling_ = 0;           ///< the largest cost seen, with costs_beyond_routes
    limiters::over_limit_cache cache_;  ///< exact answers to known rejections, this loop only
    limiters::lease_book leases_;       ///< this loop's leases of shared layers
    limiters::lease_book::totals leases_counted_;  ///< what count_leases() has added
    std::uint64_t cache_epoch_ = 0;  ///< the backend's epoch the cache's entries are from
    loop_metrics& metrics_;
    admin::windowed_top top_;  ///< the layer keys this loop limited, per minute (GET /top)
    std::map<std::string, std::size_t> waiting_;  ///< shaped requests held, per layer key
    std::shared_ptr<lease_sweeper> sweeper_;      ///< the idle give-back's state
    /// Key storage of finished requests, for the next ones (policy::keys_for writes in place).
    std::vector<std::unique_ptr<limiters::policy::request_keys>> spare_keys_;
    struct lease_scratch;
    std::vector<std::unique_ptr<lease_scratch>> spare_scratch_;  ///< decide_shared's, likewise
    /// The lease of a leased layer of a route (routes × limiters, filled on first use).
    std::vector<limiters::lease_book::slot> lease_slots_;
    limiters::lease_book::slot lease_slot(std::size_t route_index, const limiters::policy::layer& l,
                                          const std::string& key);
};

}  // namespace rategate::gateway::limiting
