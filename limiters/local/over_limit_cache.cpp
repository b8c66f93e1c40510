#include "limiters/local/over_limit_cache.hpp"

#include <algorithm>
#include <cmath>

#include "limiters/redis/chain_codec.hpp"  // reply_number: answers rounded as the script replies

namespace rategate::limiters {

bool over_limit_cache::is_shared(const policy::layer& l) {
    return l.limiter->scope == config::scope_kind::global ||
           l.limiter->scope == config::scope_kind::route;
}

bool over_limit_cache::eligible(const std::vector<const policy::layer*>& layers) {
    bool any = false;
    for (const auto* l : layers) {
        if (l->spec.shadow || l->spec.delay_us > 0) return false;
        any = any || l->limiter->cache;
    }
    return any;
}

std::optional<chain_decision> over_limit_cache::lookup(
    const std::vector<const policy::layer*>& layers, const std::vector<layer_ref>& refs,
    double now_us, double cost, double cost_ceiling) {
    if (map_.empty()) return std::nullopt;
    for (std::size_t i = 0; i < refs.size(); ++i) {
        auto found = map_.find(refs[i].key);
        if (found == map_.end()) continue;
        auto it = found->second;
        if (it->layer != layers[i] || !eligible(layers)) return std::nullopt;
        const auto* l = layers[i];
        double t = now_us + it->offset_us;
        double ttl = 0;
        bool stale = t >= it->expiry_us;
        verdict v;
        if (!stale) {
            // Frozen: the layer still rejects the cheapest request any route sends it.
            v = evaluate(l->spec, it->state, t, l->min_cost, scratch_, ttl);
            stale = v.allowed;
        }
        if (stale) {
            map_.erase(found);  // first: its key views the node's
            order_.erase(it);
            continue;
        }
        if (cost != l->min_cost) {
            v = evaluate(l->spec, it->state, t, cost, scratch_, ttl);
            if (v.allowed) return std::nullopt;  // Redis would admit this cost: ask it
        }
        double retry = reply_number(v.retry_us);
        // Every other layer of the client's own must be unable to out-wait this one (then it is
        // named, its numbers are the answer). A shared layer (global, route) may be rejecting
        // too with a later retry: SPEC §2's latitude names this layer with its retry, never a
        // later Retry-After than Redis's, so a flooding client costs Redis nothing whatever
        // the shared layers' bounds (a quota of 100k per hour has a one-hour bound).
        for (std::size_t j = 0; j < layers.size(); ++j)
            if (j != i && !is_shared(*layers[j]) &&
                !(retry_bound_us(layers[j]->spec, cost,
                                 std::max(layers[j]->max_cost, cost_ceiling)) < retry))
                return std::nullopt;
        order_.splice(order_.begin(), order_, it);
        chain_decision d;
        d.allowed = false;
        d.decider = d.header_layer = static_cast<int>(i);
        d.retry_us = retry;
        d.remaining = reply_number(v.remaining);
        d.reset_us = reply_number(v.reset_us);
        d.rule = v.rule;
        return d;
    }
    return std::nullopt;
}

void over_limit_cache::learn(const std::vector<const policy::layer*>& layers,
                             const std::vector<layer_ref>& refs, const chain_decision& d,
                             const decided_state& s, double offset_us) {
    if (capacity_ == 0) return;
    if (d.allowed) {
        if (map_.empty()) return;
        for (const auto& r : refs) {
            auto found = map_.find(r.key);
            if (found == map_.end()) continue;
            auto node = found->second;
            map_.erase(found);
            order_.erase(node);
        }
        return;
    }
    if (!s.present || d.decider < 0 || static_cast<std::size_t>(d.decider) >= layers.size()) return;
    const auto* l = layers[static_cast<std::size_t>(d.decider)];
    // A leased layer's state is not frozen: another loop's or instance's idle give-back adds
    // its unspent permits back (limiters/lua/give_back/give_back.lua), so its refusal may turn
    // into an admission with no request of this key admitted.
    if (!l->limiter->cache || l->limiter->lease > 0 || !eligible(layers)) return;
    const auto& key = refs[static_cast<std::size_t>(d.decider)].key;
    auto found = map_.find(key);
    if (found != map_.end()) {
        auto it = found->second;
        it->layer = l;
        it->state = s.state;
        it->expiry_us = s.expiry_us;
        it->offset_us = offset_us;
        order_.splice(order_.begin(), order_, it);
        return;
    }
    if (map_.size() >= capacity_) {
        map_.erase(order_.back().key);
        order_.pop_back();
    }
    order_.push_front({key, l, s.state, s.expiry_us, offset_us});
    map_.emplace(order_.front().key, order_.begin());
}

void over_limit_cache::clear() {
    map_.clear();
    order_.clear();
}

}  // namespace rategate::limiters
