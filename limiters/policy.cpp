#include "limiters/policy.hpp"

#include <arpa/inet.h>

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
        layers_.push_back({&l, std::move(spec), layers_.size()});
    }
    for (const auto& l : layers_)
        by_name[l.limiter->name] = &l;
    for (const auto& r : cfg.routes) {
        std::vector<const layer*> chain;
        for (const auto& name : r.limiters)
            chain.push_back(by_name.at(name));
        chains_.push_back(std::move(chain));
    }
}

int policy::route_index(std::string_view name) const {
    for (std::size_t i = 0; i < cfg_.routes.size(); ++i)
        if (cfg_.routes[i].name == name) return static_cast<int>(i);
    return -1;
}

std::string group_ip(std::string_view ip, int ipv6_prefix) {
    if (ipv6_prefix >= 128 || ip.find(':') == std::string_view::npos) return std::string(ip);
    std::string text(ip);
    unsigned char a[16];
    if (inet_pton(AF_INET6, text.c_str(), a) != 1) return text;
    for (int bit = ipv6_prefix; bit < 128; ++bit)
        a[bit / 8] &= static_cast<unsigned char>(~(0x80 >> (bit % 8)));
    char out[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, a, out, sizeof out);
    return std::string(out) + "/" + std::to_string(ipv6_prefix);
}

void policy::keys_for(std::size_t route_index, const identity& who, request_keys& out) const {
    out.refs.clear();
    out.layers.clear();
    out.denied_by = nullptr;
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
                if (!who.ip.empty()) value = group_ip(who.ip, c.ipv6_prefix);
                break;
            case scope_kind::header:
                tag = "h";
                if (who.header)
                    if (auto v = who.header(c.scope_header)) value = std::string(*v);
                break;
        }
        if (*tag) {
            if (value) {
                parts = std::string(tag) + "=" + escape_key_part(*value);
            } else if (c.on_missing_key == config::missing_key_policy::deny) {
                out.denied_by = l;
                return;
            } else if (c.on_missing_key == config::missing_key_policy::anonymous) {
                parts =
                    std::string(tag) + "~anonymous";  // '~' is escaped in real values: no collision
            } else {
                continue;  // skip: this layer does not apply
            }
            if (c.per_route) parts += "|r=" + escape_key_part(route.name);
        }
        out.refs.push_back({layer_key(prefix_, c.name, parts), &l->spec});
        out.layers.push_back(l);
    }
}

}  // namespace rategate::limiters
