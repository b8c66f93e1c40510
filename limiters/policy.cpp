#include "limiters/policy.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "limiters/keys.hpp"

namespace rategate::limiters {

using config::scope_kind;

namespace {

// Field names compare ASCII case-insensitively (RFC 9110 §5.1).
bool same_field_name(std::string_view a, std::string_view b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
        return (x >= 'A' && x <= 'Z' ? x + 32 : x) == (y >= 'A' && y <= 'Z' ? y + 32 : y);
    });
}

}  // namespace

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
        auto shape = shape_tag(algorithm_code(l.algo), spec.rules,
                               spec.delay_us > 0 && !spec.shadow, algorithm_facts(l.algo).layout);
        auto head = key_head(prefix_, l.name, shape);
        layers_.push_back({&l, std::move(spec), layers_.size(), std::move(head)});
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
        std::vector<std::string_view> headers;
        for (const auto* l : chain) {
            const auto& c = *l->limiter;
            if (c.scope == scope_kind::header &&
                std::none_of(headers.begin(), headers.end(), [&](std::string_view h) {
                    return same_field_name(h, c.scope_header);
                }))
                headers.push_back(c.scope_header);
        }
        auto route_part = "r=" + escape_key_part(r.name);
        // Global and route keys do not depend on the request: made once here.
        std::vector<std::string> fixed;
        for (const auto* l : chain) {
            auto scope = l->limiter->scope;
            fixed.push_back(scope == scope_kind::global  ? global_key(prefix_, l->head)
                            : scope == scope_kind::route ? l->head + "|{" + route_part + "}"
                                                         : std::string());
        }
        chains_.push_back(std::move(chain));
        fixed_keys_.push_back(std::move(fixed));
        header_names_.push_back(std::move(headers));
        route_parts_.push_back(std::move(route_part));
    }
}

std::optional<std::string_view> identity::header(std::string_view name) const {
    for (const auto& h : headers)
        if (same_field_name(h.name, name)) return h.value;
    return std::nullopt;
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
    out.layers.clear();
    out.denied_by = nullptr;
    out.invalid_by = nullptr;
    auto stop = [&out](const layer* l, const layer*& why) {
        out.refs.clear();
        out.layers.clear();
        why = l;
    };
    const auto& route_part = route_parts_[route_index];
    const auto& chain = chains_[route_index];
    const auto& fixed = fixed_keys_[route_index];
    // The refs' strings are written in place: a request_keys used again keeps their capacity.
    std::size_t n = 0;
    auto next_key = [&out, &n](const layer* l) -> std::string& {
        if (n == out.refs.size()) out.refs.emplace_back();
        auto& ref = out.refs[n++];
        ref.spec = &l->spec;
        ref.lease = {};
        out.layers.push_back(l);
        return ref.key;
    };
    for (std::size_t i = 0; i < chain.size(); ++i) {
        const auto* l = chain[i];
        const auto& c = *l->limiter;
        if (c.scope == scope_kind::global || c.scope == scope_kind::route) {
            next_key(l).assign(fixed[i]);
            continue;
        }
        std::optional<std::string_view> value;
        std::string grouped;
        std::string_view tag;
        switch (c.scope) {
            case scope_kind::user:
                tag = "u";
                value = who.user;
                break;
            case scope_kind::ip:
                tag = "ip";
                if (!who.ip.empty()) {
                    // Canonical dotted IPv4 at full length is its own key; anything else is
                    // grouped (and IPv4-mapped IPv6 made IPv4) by group_ip.
                    if (c.ipv4_prefix == 32 && c.ipv6_prefix == 128 &&
                        who.ip.find(':') == std::string_view::npos) {
                        value = who.ip;
                    } else {
                        grouped = group_ip(who.ip, c.ipv4_prefix, c.ipv6_prefix);
                        value = grouped;
                    }
                }
                break;
            case scope_kind::header:
                tag = "h";
                value = who.header(c.scope_header);
                break;
            default:
                break;
        }
        if (value && value->size() > max_identity_bytes) {
            stop(l, out.invalid_by);  // SPEC §2: never a key
            return;
        }
        if (!value) {
            if (c.on_missing_key == config::missing_key_policy::deny) {
                stop(l, out.denied_by);
                return;
            }
            if (c.on_missing_key != config::missing_key_policy::anonymous)
                continue;  // skip: this layer does not apply
        }
        auto& key = next_key(l);
        key.clear();
        key.reserve(l->head.size() + tag.size() + (value ? 3 * value->size() : 10) +
                    route_part.size() + 5);
        key += l->head;
        key += "|{";
        key += tag;
        if (value) {
            key += '=';
            append_escaped(key, *value);
        } else {
            key += "~anonymous";  // '~' is escaped in real values: no collision
        }
        if (c.per_route) {
            key += '|';
            key += route_part;
        }
        key += '}';
    }
    out.refs.resize(n);
}

}  // namespace rategate::limiters
