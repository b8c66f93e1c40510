#include "limiters/policy.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "limiters/keys.hpp"

namespace rategate::limiters {

using config::scope_kind;

policy::policy(const config::config& cfg)
    : cfg_(cfg), prefix_(cfg.redis ? cfg.redis->key_prefix : "rategate:") {
    layers_.reserve(cfg.limiters.size());
    std::map<std::string, const layer*> by_name;
    for (const auto& [name, l] : cfg.limiters) {
        layer_spec spec;
        spec.algo = l.algo;
        for (const auto& r : l.rules)
            spec.rules.push_back(to_params(l.algo, r));
        spec.shadow = l.shadow;
        spec.delay_us = l.delay ? static_cast<double>(l.delay->count()) : 0;
        auto shape = shape_tag(algorithm_code(l.algo), spec.rules);
        layers_.push_back({&l, std::move(spec), layers_.size(), std::move(shape)});
    }
    for (const auto& l : layers_)
        by_name[l.limiter->name] = &l;
    std::vector<bool> listed(layers_.size(), false);
    for (const auto& r : cfg.routes) {
        std::vector<const layer*> chain;
        for (const auto& name : r.limiters) {
            const auto* l = by_name.at(name);
            auto& m = layers_[l->index];
            auto cost = static_cast<double>(r.cost);
            m.min_cost = listed[l->index] ? std::min(m.min_cost, cost) : cost;
            m.max_cost = listed[l->index] ? std::max(m.max_cost, cost) : cost;
            listed[l->index] = true;
            chain.push_back(l);
        }
        chains_.push_back(std::move(chain));
    }
}

int policy::route_index(std::string_view name) const {
    for (std::size_t i = 0; i < cfg_.routes.size(); ++i)
        if (cfg_.routes[i].name == name) return static_cast<int>(i);
    return -1;
}

std::string group_ip(std::string_view ip, int ipv4_prefix, int ipv6_prefix) {
    std::string text(ip);
    unsigned char a[16];
    int family = AF_INET, bits = 32, prefix = ipv4_prefix;
    if (inet_pton(AF_INET, text.c_str(), a) != 1) {
        if (inet_pton(AF_INET6, text.c_str(), a) != 1) return text;
        static constexpr unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (std::memcmp(a, mapped, sizeof mapped) == 0) {
            std::memmove(a, a + 12, 4);  // an IPv4 client, however it was written
        } else {
            family = AF_INET6, bits = 128, prefix = ipv6_prefix;
        }
    }
    prefix = std::clamp(prefix, 0, bits);
    if (prefix == bits) {
        if (family == AF_INET6) return text;
    } else {
        for (int bit = prefix; bit < bits; ++bit)
            a[bit / 8] &= static_cast<unsigned char>(~(0x80 >> (bit % 8)));
    }
    char out[INET6_ADDRSTRLEN];
    inet_ntop(family, a, out, sizeof out);
    if (prefix == bits) return out;
    return std::string(out) + "/" + std::to_string(prefix);
}

void policy::keys_for(std::size_t route_index, const identity& who, request_keys& out) const {
    out.refs.clear();
    out.layers.clear();
    out.denied_by = nullptr;
    out.invalid_by = nullptr;
    auto stop = [&out](const layer* l, const layer*& why) {
        out.refs.clear();
        out.layers.clear();
        why = l;
    };
    const auto& route = cfg_.routes[route_index];
    for (const auto* l : chains_[route_index]) {
        const auto& c = *l->limiter;
        std::string parts;
        std::optional<std::string> value;
        const char* tag = "";
        switch (c.scope) {
            case scope_kind::global:
                break;
            case scope_kind::route:
                parts = "r=" + escape_key_part(route.name);
                break;
            case scope_kind::user:
                tag = "u";
                if (who.user) value = std::string(*who.user);
                break;
            case scope_kind::ip:
                tag = "ip";
                if (!who.ip.empty()) value = group_ip(who.ip, c.ipv4_prefix, c.ipv6_prefix);
                break;
            case scope_kind::header:
                tag = "h";
                if (who.header)
                    if (auto v = who.header(c.scope_header)) value = std::string(*v);
                break;
        }
        if (*tag) {
            if (value && value->size() > max_identity_bytes) {
                stop(l, out.invalid_by);  // SPEC §2: never a key
                return;
            }
            if (value) {
                parts = std::string(tag) + "=" + escape_key_part(*value);
            } else if (c.on_missing_key == config::missing_key_policy::deny) {
                stop(l, out.denied_by);
                return;
            } else if (c.on_missing_key == config::missing_key_policy::anonymous) {
                parts =
                    std::string(tag) + "~anonymous";  // '~' is escaped in real values: no collision
            } else {
                continue;  // skip: this layer does not apply
            }
            if (c.per_route) parts += "|r=" + escape_key_part(route.name);
        }
        out.refs.push_back({layer_key(prefix_, c.name, parts, l->shape), &l->spec});
        out.layers.push_back(l);
    }
}

}  // namespace rategate::limiters
