#include "limiters/local/local_store.hpp"

#include "limiters/lease_give_back.hpp"

#include <algorithm>
#include <functional>

namespace rategate::limiters {

local_store::local_store(std::size_t max_keys, std::size_t shards)
    : max_per_shard_(std::max<std::size_t>(1, max_keys / std::max<std::size_t>(1, shards))) {
    for (std::size_t i = 0; i < std::max<std::size_t>(1, shards); ++i)
        shards_.push_back(std::make_unique<shard>());
}

std::size_t local_store::shard_of(const std::string& key) const {
    return std::hash<std::string>{}(key) % shards_.size();
}

void local_store::make_room(shard& s, double now) {
    // Expired keys first; if that frees nothing, the tenth of the shard closest to expiry.
    std::erase_if(s.map, [now](const auto& kv) { return kv.second.expires_at_us <= now; });
    if (s.map.size() < max_per_shard_) return;
    std::vector<std::pair<double, const std::string*>> by_expiry;
    by_expiry.reserve(s.map.size());
    for (const auto& [k, e] : s.map)
        by_expiry.emplace_back(e.expires_at_us, &k);
    std::size_t drop = std::max<std::size_t>(1, s.map.size() / 10);
    std::nth_element(by_expiry.begin(), by_expiry.begin() + static_cast<std::ptrdiff_t>(drop - 1),
                     by_expiry.end());
    std::vector<std::string> victims;
    for (std::size_t i = 0; i < drop; ++i)
        victims.push_back(*by_expiry[i].second);
    for (const auto& k : victims)
        s.map.erase(k);
}

chain_decision local_store::decide(const std::vector<layer_ref>& layers, double now, double cost,
                                   std::vector<lease_grant>* grants) {
    // Lock every shard involved, in index order.
    std::vector<std::size_t> ids;
    ids.reserve(layers.size());
    for (const auto& l : layers)
        ids.push_back(shard_of(l.key));
    std::vector<std::size_t> order = ids;
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    std::vector<std::unique_lock<std::mutex>> locks;
    locks.reserve(order.size());
    for (auto i : order)
        locks.emplace_back(shards_[i]->mutex);

    static const layer_state absent{};
    std::vector<const layer_spec*> specs;
    std::vector<const layer_state*> states;
    specs.reserve(layers.size());
    states.reserve(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
        specs.push_back(layers[i].spec);
        auto& map = shards_[ids[i]]->map;
        auto it = map.find(layers[i].key);
        // Logical expiry: state past its TTL on the limiter clock counts as absent.
        states.push_back(it != map.end() && it->second.expires_at_us > now ? &it->second.state
                                                                           : &absent);
    }
    std::vector<lease_ask> asks;
    for (std::size_t i = 0; i < layers.size(); ++i)
        if (layers[i].lease.want > 0) {
            asks.resize(layers.size());
            asks[i] = layers[i].lease;
        }
    chain_writes writes;
    auto d = decide_chain(specs, states, now, cost, writes, asks.empty() ? nullptr : &asks, grants);
    for (std::size_t i = 0; i < layers.size(); ++i) {
        if (!writes.commit[i]) continue;
        auto& s = *shards_[ids[i]];
        auto it = s.map.find(layers[i].key);
        if (it == s.map.end()) {
            if (s.map.size() >= max_per_shard_) make_room(s, now);
            it = s.map.emplace(layers[i].key, entry{}).first;
        }
        it->second.state = std::move(writes.next[i]);
        it->second.expires_at_us = now + writes.ttl_us[i];
    }
    return d;
}

bool local_store::give_back(const std::string& key, const layer_spec& spec, double permits,
                            double granted_at) {
    auto& s = *shards_[shard_of(key)];
    std::lock_guard lock(s.mutex);
    auto it = s.map.find(key);
    if (it == s.map.end() || it->second.expires_at_us <= granted_at) return false;
    return give_back_permits(spec, it->second.state, permits, granted_at);
}

std::optional<layer_state> local_store::peek(const std::string& key, double now,
                                             double* expires_at_us) const {
    const auto& s = *shards_[shard_of(key)];
    std::lock_guard lock(s.mutex);
    auto it = s.map.find(key);
    if (it == s.map.end() || it->second.expires_at_us <= now) return std::nullopt;
    if (expires_at_us) *expires_at_us = it->second.expires_at_us;
    return it->second.state;
}

std::size_t local_store::size() const {
    std::size_t n = 0;
    for (const auto& s : shards_) {
        std::lock_guard lock(s->mutex);
        n += s->map.size();
    }
    return n;
}

}  // namespace rategate::limiters
