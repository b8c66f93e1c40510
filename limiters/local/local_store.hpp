// The in-process limiter backend: layer state in a sharded hash map with logical expiry and a
// memory bound. Used when the config has no `redis` section, for on_redis_error "local", and by
// `rategate replay`. Each shard has its own mutex; a chain locks only the shards of its keys
// (in shard order, so chains never deadlock): there is no global lock on the request path.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "limiters/chain.hpp"

namespace rategate::limiters {

/// One layer of a request's chain: its key and its spec.
struct layer_ref {
    std::string key;
    const layer_spec* spec;
    lease_ask lease{};  ///< want > 0: a leased layer's ask (SPEC §2 `sync`), else exact
};

class local_store {
  public:
    /// `max_keys`: bound on stored keys; beyond it idle (expired) keys go first, then the keys
    /// closest to expiry.
    explicit local_store(std::size_t max_keys = 1'000'000, std::size_t shards = 64);

    /// Decides one request atomically over its chain at `now_us` (the limiter clock, µs).
    /// Layers with a lease ask decide as decide_chain says; `grants`, if given, receives their
    /// records (the chain script's twin; the gateway's in-process backend asks for no lease).
    chain_decision decide(const std::vector<layer_ref>& layers, double now_us, double cost,
                          std::vector<lease_grant>* grants = nullptr);

    /// Gives `permits` unused leased permits granted at `granted_at_us` (the limiter clock)
    /// back to `key`'s state, as give_back_permits() says (limiters/lease_give_back.hpp): the
    /// twin of the give-back script. A key absent or logically expired by `granted_at_us` is
    /// left alone. Returns true when the state changed.
    bool give_back(const std::string& key, const layer_spec& spec, double permits,
                   double granted_at_us);

    /// The stored state of `key` as of `now_us` (nullopt when absent or logically expired);
    /// `expires_at_us`, if given, receives its logical expiry.
    std::optional<layer_state> peek(const std::string& key, double now_us,
                                    double* expires_at_us = nullptr) const;

    std::size_t size() const;

  private:
    struct entry {
        layer_state state;
        double expires_at_us = 0;
    };
    struct shard {
        mutable std::mutex mutex;
        std::unordered_map<std::string, entry> map;
    };
    std::size_t shard_of(const std::string& key) const;
    void make_room(shard& s, double now_us);

    std::vector<std::unique_ptr<shard>> shards_;
    std::size_t max_per_shard_;
};

}  // namespace rategate::limiters
