#include "limiters/chain.hpp"

#include <algorithm>
#include <limits>

namespace rategate::limiters {

chain_decision decide_chain(const std::vector<const layer_spec*>& specs,
                            const std::vector<const layer_state*>& states, double now, double cost,
                            chain_writes& w, const std::vector<lease_ask>* asks,
                            std::vector<lease_grant>* grants) {
    const std::size_t n = specs.size();
    std::vector<verdict> verdicts(n);
    std::vector<bool> leased(n, false);
    w.commit.assign(n, false);
    w.next.assign(n, layer_state{});
    w.ttl_us.assign(n, 0);
    for (std::size_t l = 0; l < n; ++l) {
        if (asks && (*asks)[l].want > 0) {
            // A leased layer: decides the request's `need`; admitting it, takes `need` and up
            // to `want - need` more (what is left after `need`, whole permits), kept whatever
            // the other layers decide. Twin: the leased branch in limiters/lua/90_chain.lua.
            const auto& ask = (*asks)[l];
            leased[l] = true;
            verdicts[l] = evaluate(*specs[l], *states[l], now, ask.need, w.next[l], w.ttl_us[l]);
            lease_grant g;
            if (verdicts[l].allowed) {
                g.granted = ask.need + std::min(ask.want - ask.need, verdicts[l].remaining);
                auto after =
                    evaluate(*specs[l], *states[l], now, g.granted, w.next[l], w.ttl_us[l]);
                g.remaining = after.remaining;
                g.reset_us = after.reset_us;
                g.rule = after.rule;
                w.commit[l] = true;
            } else {
                verdicts[l].remaining = 0;
                g.reset_us = verdicts[l].reset_us;
                g.rule = verdicts[l].rule;
            }
            if (grants) grants->push_back(g);
            continue;
        }
        verdicts[l] = evaluate(*specs[l], *states[l], now, cost, w.next[l], w.ttl_us[l]);
    }

    chain_decision d;
    bool all_wait = true;
    for (std::size_t l = 0; l < n; ++l) {
        const auto& v = verdicts[l];
        if (specs[l]->shadow) {
            if (!v.allowed) d.shadow_mask |= 1u << l;
        } else if (!v.allowed) {
            // The most restrictive rejecting layer decides: the longest retry, first on ties.
            if (d.allowed || v.retry_us > d.retry_us) {
                d.decider = static_cast<int>(l);
                d.retry_us = v.retry_us;
            }
            d.allowed = false;
            if (v.wait_us > 0)
                d.wait_us = std::max(d.wait_us, v.wait_us);
            else
                all_wait = false;
        }
    }
    if (d.allowed) {
        d.wait_us = 0;
        for (std::size_t l = 0; l < n; ++l) {
            if (!verdicts[l].allowed || leased[l]) continue;
            if (!specs[l]->shadow && verdicts[l].reserved)
                d.wait_us = std::max(d.wait_us, verdicts[l].wait_us);
            w.commit[l] = true;
        }
    } else if (!all_wait) {
        d.wait_us = 0;
    }
    if (!d.allowed) {
        d.header_layer = d.decider;
    } else {
        double best = std::numeric_limits<double>::infinity();
        for (std::size_t l = 0; l < n; ++l) {
            if (!specs[l]->shadow && !leased[l] && verdicts[l].remaining < best) {
                best = verdicts[l].remaining;
                d.header_layer = static_cast<int>(l);
            }
        }
    }
    if (d.header_layer >= 0) {
        const auto& hv = verdicts[d.header_layer];
        d.remaining = hv.remaining;
        d.reset_us = hv.reset_us;
        d.rule = hv.rule;
    }
    return d;
}

}  // namespace rategate::limiters
