// The Redis Cluster backend of one event loop (SPEC §2 "Redis deployments", Cluster). A
// request's chain is split by hash slot: each layer key is one counter, in one slot
// (limiters/keys.hpp: the braces are the hash tag). Each slot's part is decided atomically by
// one call of the chain script on that slot's master; parts of one request go out in
// parallel. The parts of all queued requests that one master serves go in one call of the
// cross-slot chain script (keys of several slots of that master; up to 64 parts), as the
// single-server backend batches; when such a call certainly did not run (the map moved, a key
// is not the master's any more), its parts go slot by slot, following MOVED and ASK. When a part
// rejects, the request is rejected, and every part that consumed is undone by a refund
// (limiters/lua/refund/refund.lua, sent at once, before the request is answered, on the same
// per-master connection as later calls from this loop). Why a refund never lets a limit be exceeded
// is written per algorithm at the top of refund.lua; a rejected request may hold another layer's
// quota for one round trip. The refunds of many rejected requests go to each master in one call,
// as the decisions do.
//
// Leased layers (SPEC §2 `sync`) go in the part of their key's slot, so a shared counter's lease
// is taken by a call to the master that owns it, in the same call as any exact layers of that
// slot; the per-user and per-IP layers stay exact in their own parts. A lease is taken whatever
// the other parts decide: a rejected request's refund leaves leased layers out (the pipeline
// keeps their grants in the loop's lease). When a part fails, nothing is answered for the
// request, and the grants the other parts took are refunded.
//
// The over-limit cache is off with a cluster (config): a refund can give back quota that a
// cached refusal would still hold.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "limiters/backend.hpp"

namespace boost::asio {
class any_io_executor;
}

namespace rategate::limiters::redis {
class cluster;
}

namespace rategate::limiters {

/// One slot's part of a split chain: its decision, and the chain positions (0-based,
/// ascending) of its layers, in the part's order.
struct part_decision {
    chain_decision decision;
    const std::vector<int>* positions;
};

/// One leased layer's lease record (SPEC §2 `sync`) as a part's call returned it, with the
/// layer's chain position (0-based).
struct placed_grant {
    int position = 0;
    lease_grant grant;
};

/// The lease records of a chain decided in parts, in chain order (as the chain script returns
/// them for the whole chain in one call): every part's records merged by position.
std::vector<lease_grant> combine_grants(std::vector<placed_grant> parts);

/// The decision of a whole chain from its parts' decisions, as the chain script would have
/// decided the chain in one call (limiters/lua/90_chain.lua): allowed when every part is; the
/// decider is the rejecting layer with the longest retry, first in chain order on ties; the
/// header layer of an admitted request is the one with the fewest permits left (first on
/// ties); wait is the longest reserved wait when admitted, and when rejected the longest wait
/// if every rejecting part would conform within its delay, else 0; shadow masks are merged.
chain_decision combine_parts(const std::vector<part_decision>& parts);

class cluster_backend final : public backend {
  public:
    /// Called once per chain script call: decisions (parts) in it, latency µs, failed.
    using call_observer =
        std::function<void(std::size_t decisions, double latency_us, bool failed)>;

    /// `store` (started elsewhere) belongs to the event loop of `ex` and outlives the
    /// backend (split chains and refunds are counted in its counts()); its script 0 is the chain
    /// script, 1 the refund script, 2 and 3 their cross-slot forms, 4 the give-back script.
    /// `redis_clock`: each master's script reads its own TIME (clock "redis"), else the gateway's
    /// wall clock is sent with each call.
    cluster_backend(const boost::asio::any_io_executor& ex, redis::cluster& store, bool redis_clock,
                    call_observer observer = {});
    ~cluster_backend() override;

    boost::asio::awaitable<answer> decide(const std::vector<layer_ref>& refs, double cost,
                                          const clock& at, bool want_state) override;
    /// Leased layers go with their lease asks to the master of their slot (SPEC §2 `sync`).
    bool leases() const override { return true; }
    /// One call of the give-back script (script 4) per slot, to the slot's master, in turn.
    boost::asio::awaitable<std::error_code> give_back(std::vector<lease_return> items) override;
    /// Every slot's master answers.
    bool ready() const override;
    std::uint64_t epoch() const override;

    /// Decisions per call at most.
    static constexpr std::size_t max_batch = 64;

    struct impl;

  private:
    std::shared_ptr<impl> impl_;
};

}  // namespace rategate::limiters
