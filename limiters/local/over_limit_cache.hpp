// The exact over-limit cache (SPEC §2 "Exact shortcuts"): per event loop, the state on which a
// layer rejected a request, so that later requests of that key are answered without Redis for
// as long as the answer is provably the one Redis would give. Sans-I/O; the request path in
// gateway/limiting/pipeline.cpp and `rategate replay` feed it.
//
// Why a cached answer is exact, for a rejection by layer L of a chain:
// 1. L's state is frozen. Every route's request touching L's key costs at least L's
//    `min_cost` (the least cost of a route listing L). While L, on the cached state, rejects
//    `min_cost` at the time t of the lookup, every such request from any instance up to t was
//    rejected by L (rejection is monotone in time on an unchanged state: tokens refill,
//    windows and log entries only expire, Guava's next free ticket only comes nearer), and a
//    rejected request writes nothing (all or nothing). So Redis still holds the cached state.
// 2. L's verdict at t is the C++ twin's `evaluate` on that state at t: the parity tests hold
//    the twin to the Lua script's decisions, retry, remaining and reset included.
// 3. L decides the chain: the chain names the rejecting layer with the longest retry (first on
//    ties). Every other layer of the chain can give at most `retry_bound_us` (its algorithm's
//    bound for this cost), so if L's retry is longer than all of those, L is named, and the
//    status, body and headers (L's retry, remaining, reset and rule) are L's alone.
//    Shared layers (scope global and route, whose state other clients change) are not held
//    to that bound: SPEC §2 lets the answer name L with its retry when a shared layer might be
//    rejecting too with a later one. The verdict is Redis's either way (L rejects, so the
//    chain does), and the Retry-After is never later than Redis's (the chain's retry is the
//    longest of its rejecting layers', L's among them). So a client flooding past its own
//    limit costs Redis nothing, whatever the shared layers.
// Not cached: chains with a shadow layer (it would be counted) or a delay layer (it waits
// instead of rejecting), limiters with "cache": false, refusals by a leased layer (`sync`: an
// idle give-back puts permits back, so its state is not frozen), and logs with more than 64 entries
// in their longest window. Time is the limiter clock: the gateway's, or Redis TIME estimated from
// the reply the state came with (the script's clock minus the local clock at the reply), so a
// cached answer is the one Redis gives at a Redis time the request's round trip could have
// spanned. All instances must run the same routes' costs (one config).
#pragma once

#include <cstddef>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "limiters/chain.hpp"
#include "limiters/policy.hpp"

namespace rategate::limiters {

class over_limit_cache {
  public:
    /// Holds at most `capacity` keys (least recently used goes first); 0 disables the cache.
    explicit over_limit_cache(std::size_t capacity) : capacity_(capacity) {}

    /// True when a rejection of this chain may be cached: no shadow or delay layer, and at
    /// least one layer with caching on. Chains for which this is false never hit.
    static bool eligible(const std::vector<const policy::layer*>& layers);

    /// True for a layer whose one counter every client shares (scope `global` or `route`): a
    /// cached rejection by another layer may be named over it (SPEC §2 "Exact shortcuts").
    static bool is_shared(const policy::layer& l);

    /// The decision for a request of `cost` over `layers`/`refs` (parallel, chain order) at
    /// `now_us` on the local clock, if a cached state gives it exactly; nullopt otherwise.
    /// Entries found stale (their layer admits `min_cost` now) are dropped. `cost_ceiling`:
    /// the largest cost any request may have had beyond the routes' own (replay traces carry
    /// their own costs; 0 in the gateway), for the Guava layers' debt bound.
    std::optional<chain_decision> lookup(const std::vector<const policy::layer*>& layers,
                                         const std::vector<layer_ref>& refs, double now_us,
                                         double cost, double cost_ceiling = 0);

    /// Learns from a decision Redis gave: a rejection with the decider's state is remembered
    /// (`offset_us` = the limiter clock minus the local clock, 0 with the gateway clock); an
    /// admission drops what the chain's keys had (their state changed).
    void learn(const std::vector<const policy::layer*>& layers, const std::vector<layer_ref>& refs,
               const chain_decision& d, const decided_state& s, double offset_us);

    void clear();
    std::size_t size() const { return map_.size(); }
    std::size_t capacity() const { return capacity_; }

  private:
    struct entry {
        std::string key;
        const policy::layer* layer;
        layer_state state;
        double expiry_us;  ///< logical expiry on the limiter clock
        double offset_us;  ///< limiter clock minus local clock
    };
    using lru = std::list<entry>;
    std::size_t capacity_;
    lru order_;  ///< most recently used first; a node never moves, so map_ keys view its key
    std::unordered_map<std::string_view, lru::iterator> map_;
    layer_state scratch_;
};

}  // namespace rategate::limiters
