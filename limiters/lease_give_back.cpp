#include "limiters/lease_give_back.hpp"

#include <algorithm>
#include <cmath>

namespace rategate::limiters {

bool give_back_permits(const layer_spec& spec, layer_state& state, double permits,
                       double granted_at) {
    bool tokens = spec.algo == config::algorithm::token_bucket;
    if (!tokens && spec.algo != config::algorithm::fixed_window) return false;
    auto& st = state.values;
    if (!state.present || st.size() != 2 * spec.rules.size()) return false;
    bool changed = false;
    for (std::size_t r = 0; r < spec.rules.size(); ++r) {
        const auto& p = spec.rules[r];
        double* v = &st[2 * r];
        double before[2] = {v[0], v[1]};
        // The same double arithmetic as the script, in the same order.
        if (tokens)
            v[0] = std::max(v[0], std::min(p[2], v[0] + permits));
        else if (v[0] == std::floor(granted_at / p[1]) * p[1])
            v[1] = std::max(0.0, v[1] - permits);
        changed = changed || v[0] != before[0] || v[1] != before[1];
    }
    return changed;
}

}  // namespace rategate::limiters
