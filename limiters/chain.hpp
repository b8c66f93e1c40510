// All-or-nothing decision of one request over a chain of layers (SPEC §2 "Limiters"): every
// layer decides first; state is stored only if every enforced layer admits; shadow layers never
// block and consume only when the request is admitted and they would admit it. The Lua twin is
// limiters/lua/90_chain.lua.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "limiters/algorithms/algorithms.hpp"

namespace rategate::limiters {

/// The decision for one request, in the same nine numbers the chain script returns.
struct chain_decision {
    bool allowed = true;
    int decider = -1;       ///< the enforced layer that rejected with the longest retry, first
                            ///< on ties (position in the chain), or -1
    double wait_us = 0;     ///< admitted: reserved delay to wait before forwarding; rejected:
                            ///< every rejecting layer would conform within its delay after this
    double retry_us = 0;    ///< rejected: µs until the request could conform
    int header_layer = -1;  ///< most restrictive enforced layer (for the RateLimit headers)
    double remaining = 0;   ///< of that layer's most restrictive rule, after this request
    double reset_us = 0;    ///< µs until that rule is fully available again
    int rule = 0;           ///< that rule's index
    std::uint32_t shadow_mask = 0;  ///< bit i: shadow layer i would have rejected
};

/// The most layers one chain may have: the width of chain_decision::shadow_mask (the config
/// refuses a route listing more limiters).
inline constexpr std::size_t max_chain_layers = 32;
static_assert(sizeof(chain_decision::shadow_mask) * 8 == max_chain_layers);

/// The state a rejecting layer was decided on, as a backend reports it when asked (the chain
/// script's reply, limiters/redis/chain_codec.hpp): the twin's layer_state (state numbers, or
/// the log entries a later decision can still see) and the state's logical expiry on the
/// limiter clock (µs; +inf for a log).
struct decided_state {
    bool present = false;
    layer_state state;
    double expiry_us = 0;
};

/// A leased layer's ask in one decision (SPEC §2 `sync`): `need` of the request's permits must
/// come from the shared counter now (the rest the loop's lease covers), and, if the layer
/// admits `need`, up to `want` (>= need) permits are taken from it at once: the request's
/// `need` and a lease of the rest. `want` > 0 marks the layer as leased.
struct lease_ask {
    double need = 0;  ///< permits
    double want = 0;  ///< permits; 0: an exact layer
};

/// What a leased layer's ask got (the chain script's lease record): `granted` permits taken
/// (`need` + the lease; 0 when the layer refused `need`), then the counter's remaining and
/// reset (µs) after them and the rule these are of.
struct lease_grant {
    double granted = 0;
    double remaining = 0;
    double reset_us = 0;
    int rule = 0;
};

/// Unused permits of one loop's lease going back to their shared counter (SPEC §2 `sync`, idle
/// give-back; limiters/lua/give_back/give_back.lua).
struct lease_return {
    std::string key;
    const layer_spec* spec = nullptr;
    double permits = 0;        ///< unused, not expired
    double granted_at_us = 0;  ///< the limiter-clock time of the earliest grant among them
};

/// What decide_chain wants stored: for each layer, whether to write `next[i]` with `ttl_us[i]`.
struct chain_writes {
    std::vector<bool> commit;
    std::vector<layer_state> next;
    std::vector<double> ttl_us;
};

/// Decides one request of `cost` at `now_us` over `specs[i]` with current `states[i]`.
/// `asks` (parallel to `specs`, or null) marks leased layers: such a layer decides `need` in
/// place of `cost`, takes its grant whatever the other layers decide (the write is committed
/// even when the request is refused) and is left out of the header fold (the caller adds its
/// lease); refusing, its remaining is 0. `grants` receives one record per leased layer, chain
/// order.
chain_decision decide_chain(const std::vector<const layer_spec*>& specs,
                            const std::vector<const layer_state*>& states, double now_us,
                            double cost, chain_writes& writes,
                            const std::vector<lease_ask>* asks = nullptr,
                            std::vector<lease_grant>* grants = nullptr);

}  // namespace rategate::limiters
