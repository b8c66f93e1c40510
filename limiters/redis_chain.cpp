#include "limiters/redis_chain.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unordered_map>

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

// The script unpacks these with Lua's struct library in native byte order.
void put_double(std::string& out, double v) {
    char b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    out.append(b, sizeof v);
}

void put_u16(std::string& out, std::size_t v) {
    auto u = static_cast<std::uint16_t>(v);
    char b[sizeof u];
    std::memcpy(b, &u, sizeof u);
    out.append(b, sizeof u);
}
}  // namespace

chain_batch encode_batch(
    const std::vector<std::pair<const std::vector<layer_ref>*, double>>& requests, double now) {
    chain_batch b;
    b.requests = requests.size();
    std::unordered_map<std::string_view, std::size_t> key_index;
    std::vector<const layer_spec*> specs;  // a batch holds a few: a linear lookup
    std::string spec_args, costs, layers;
    costs.reserve(requests.size() * 8);
    for (const auto& [chain, cost] : requests) {
        put_double(costs, cost);
        put_u16(layers, chain->size());
        for (const auto& l : *chain) {
            auto [it, added] = key_index.try_emplace(l.key, b.keys.size());
            if (added) b.keys.push_back(l.key);
            std::size_t k = it->second;
            std::size_t s = 0;
            while (s < specs.size() && specs[s] != l.spec)
                ++s;
            if (s == specs.size()) specs.push_back(l.spec);
            put_u16(layers, k + 1);
            put_u16(layers, s + 1);
        }
    }
    for (const auto* s : specs) {
        put_double(spec_args, algorithm_code(s->algo));
        put_double(spec_args, s->shadow ? 1 : 0);
        put_double(spec_args, s->delay_us);
        put_double(spec_args, static_cast<double>(s->rules.size()));
        for (const auto& r : s->rules)
            for (double v : r)
                put_double(spec_args, v);
    }
    b.args.push_back(now < 0 ? std::string() : number(now));
    b.args.push_back(std::move(spec_args));
    b.args.push_back(std::move(costs));
    b.args.push_back(std::move(layers));
    return b;
}

namespace {
// A number as an integer reply would carry it: truncated toward zero.
double truncated(double v) {
    if (!(v > -9.2e18 && v < 9.2e18)) return 0;
    return static_cast<double>(static_cast<long long>(v));
}
}  // namespace

bool decode_batch(const redis::reply& r, std::vector<chain_decision>& out) {
    constexpr std::size_t record = 9 * sizeof(double);
    if (r.type != redis::reply::kind::string || r.str.size() % record != 0) return false;
    for (std::size_t i = 0; i < r.str.size(); i += record) {
        double v[9];
        std::memcpy(v, r.str.data() + i, record);
        for (double& x : v)
            x = truncated(x);
        chain_decision d;
        d.allowed = v[0] == 1;
        d.decider = static_cast<int>(v[1]);
        d.wait_us = v[2];
        d.retry_us = v[3];
        d.header_layer = static_cast<int>(v[4]);
        d.remaining = v[5];
        d.reset_us = v[6];
        d.rule = static_cast<int>(v[7]);
        d.shadow_mask = static_cast<std::uint32_t>(v[8]);
        out.push_back(d);
    }
    return true;
}

}  // namespace rategate::limiters
