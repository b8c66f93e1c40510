#include "limiters/redis_chain.hpp"

#include <cstdio>
#include <map>

#include "limiters/embedded_scripts.hpp"

namespace rategate::limiters {

std::string_view chain_script() {
    return embedded_script_source("chain.lua");
}

namespace {
std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}
}  // namespace

chain_batch encode_batch(
    const std::vector<std::pair<const std::vector<layer_ref>*, double>>& requests, double now) {
    chain_batch b;
    b.requests = requests.size();
    std::map<std::string_view, std::size_t> key_index;
    std::map<const layer_spec*, std::size_t> spec_index;
    std::vector<const layer_spec*> specs;
    for (const auto& [layers, cost] : requests) {
        for (const auto& l : *layers) {
            if (!key_index.count(l.key)) {
                b.keys.push_back(l.key);
                key_index.emplace(l.key, b.keys.size());
            }
            if (!spec_index.count(l.spec)) {
                specs.push_back(l.spec);
                spec_index.emplace(l.spec, specs.size());
            }
        }
    }
    b.args.push_back(now < 0 ? std::string() : number(now));
    b.args.push_back(std::to_string(specs.size()));
    for (const auto* s : specs) {
        b.args.push_back(std::to_string(algorithm_code(s->algo)));
        b.args.push_back(s->shadow ? "1" : "0");
        b.args.push_back(number(s->delay_us));
        b.args.push_back(std::to_string(s->rules.size()));
        for (const auto& r : s->rules)
            for (double v : r)
                b.args.push_back(number(v));
    }
    b.args.push_back(std::to_string(requests.size()));
    for (const auto& [layers, cost] : requests) {
        b.args.push_back(number(cost));
        b.args.push_back(std::to_string(layers->size()));
        for (const auto& l : *layers) {
            b.args.push_back(std::to_string(key_index.at(l.key)));
            b.args.push_back(std::to_string(spec_index.at(l.spec)));
        }
    }
    return b;
}

bool decode_batch(const redis::reply& r, std::vector<chain_decision>& out) {
    if (r.type != redis::reply::kind::array || r.elements.size() % 9 != 0) return false;
    for (std::size_t i = 0; i < r.elements.size(); i += 9) {
        auto at = [&](std::size_t k) { return r.elements[i + k].integer; };
        for (std::size_t k = 0; k < 9; ++k)
            if (r.elements[i + k].type != redis::reply::kind::integer) return false;
        chain_decision d;
        d.allowed = at(0) == 1;
        d.decider = static_cast<int>(at(1));
        d.wait_us = static_cast<double>(at(2));
        d.retry_us = static_cast<double>(at(3));
        d.header_layer = static_cast<int>(at(4));
        d.remaining = static_cast<double>(at(5));
        d.reset_us = static_cast<double>(at(6));
        d.rule = static_cast<int>(at(7));
        d.shadow_mask = static_cast<std::uint32_t>(at(8));
        out.push_back(d);
    }
    return true;
}

}  // namespace rategate::limiters
