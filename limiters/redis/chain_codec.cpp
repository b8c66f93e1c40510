#include "limiters/redis/chain_codec.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>

namespace rategate::limiters {

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
    const std::vector<std::pair<const std::vector<layer_ref>*, double>>& requests, double now,
    const std::vector<bool>* want_state) {
    chain_batch b;
    b.requests = requests.size();
    // Distinct keys by open addressing in a table reused by the thread: no node per key.
    std::size_t layer_count = 0;
    for (const auto& r : requests)
        layer_count += r.first->size();
    std::size_t slots = 16;
    while (slots < 2 * layer_count)
        slots *= 2;
    thread_local std::vector<std::uint32_t> table;  // 0 = empty, else key index + 1
    table.assign(slots, 0);
    b.keys.reserve(layer_count);
    auto index_of = [&](std::string_view key) -> std::size_t {
        auto i = std::hash<std::string_view>{}(key) & (slots - 1);
        while (table[i] != 0) {
            if (b.keys[table[i] - 1] == key) return table[i] - 1;
            i = (i + 1) & (slots - 1);
        }
        b.keys.push_back(key);
        table[i] = static_cast<std::uint32_t>(b.keys.size());
        return b.keys.size() - 1;
    };
    std::vector<const layer_spec*> specs;  // a batch holds a few: a linear lookup
    std::string spec_args, costs, layers;
    costs.reserve(requests.size() * 8);
    layers.reserve(requests.size() * 2 + layer_count * 4);
    // The key index at each chain position of the previous request: the global and route keys
    // (and a busy client's) repeat from request to request, and a compare is cheaper than a hash.
    std::vector<std::size_t> previous;
    for (std::size_t r = 0; r < requests.size(); ++r) {
        const auto& [chain, cost] = requests[r];
        put_double(costs, cost);
        bool want = want_state && (*want_state)[r];
        put_u16(layers, chain->size() + (want ? 0x8000 : 0));
        if (previous.size() < chain->size()) previous.resize(chain->size(), SIZE_MAX);
        for (std::size_t p = 0; p < chain->size(); ++p) {
            const auto& l = (*chain)[p];
            std::size_t k = previous[p] != SIZE_MAX && b.keys[previous[p]] == l.key
                                ? previous[p]
                                : index_of(l.key);
            previous[p] = k;
            std::size_t s = 0;
            while (s < specs.size() && specs[s] != l.spec)
                ++s;
            if (s == specs.size()) specs.push_back(l.spec);
            put_u16(layers, k + 1);
            bool leased = l.lease.want > 0;
            put_u16(layers, s + 1 + (leased ? 0x4000 : 0));
            if (leased) {
                put_double(costs, l.lease.need);
                put_double(costs, l.lease.want);
            }
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

double reply_number(double v) {
    if (!(v > -9.2e18 && v < 9.2e18)) return 0;
    return static_cast<double>(static_cast<long long>(v));
}

bool decode_batch(const redis::reply& r, std::vector<chain_decision>& out,
                  std::vector<decided_state>* states, double* now_us,
                  const std::vector<std::size_t>* leased, std::vector<lease_grant>* grants) {
    constexpr std::size_t head = 11 * sizeof(double);
    if (r.type != redis::reply::kind::string) return false;
    const std::string& s = r.str;
    std::size_t i = 0, request = 0;
    while (i < s.size()) {
        if (s.size() - i < head) return false;
        double v[11];
        std::memcpy(v, s.data() + i, head);
        i += head;
        double extra = v[10];
        if (!(extra >= 0 && extra <= static_cast<double>((s.size() - i) / sizeof(double))) ||
            extra != std::floor(extra))
            return false;
        auto n = static_cast<std::size_t>(extra);
        if (n == 1) return false;  // a state is at least its kind and expiry
        if (now_us) *now_us = v[9];
        for (std::size_t k = 0; k < 9; ++k)
            v[k] = reply_number(v[k]);
        // Positions and the rule index fit a chain (at most 0x7fff layers), the mask 32 bits.
        for (std::size_t k : {1, 4, 7})
            if (!(v[k] >= -1 && v[k] <= 0x7fff)) return false;
        if (!(v[8] >= 0 && v[8] <= 4294967295.0)) return false;
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
        if (states) {
            decided_state ds;
            if (n >= 2) {
                std::vector<double> x(n);
                std::memcpy(x.data(), s.data() + i, n * sizeof(double));
                ds.present = true;
                ds.state.present = true;
                if (x[0] != 0 && x[0] != 1) return false;
                if (x[0] == 1) {
                    if (n % 2 != 0) return false;
                    ds.expiry_us = std::numeric_limits<double>::infinity();
                    for (std::size_t k = 2; k < n; k += 2)
                        ds.state.log.push_back({x[k], x[k + 1]});
                } else {
                    ds.expiry_us = x[1];
                    ds.state.values.assign(x.begin() + 2, x.end());
                }
            }
            states->push_back(std::move(ds));
        }
        i += n * sizeof(double);
        // The lease records: granted, remaining, reset, rule.
        std::size_t records = leased && request < leased->size() ? (*leased)[request] : 0;
        ++request;
        if (records > (s.size() - i) / (4 * sizeof(double))) return false;
        for (std::size_t k = 0; k < records; ++k) {
            double g[4];
            std::memcpy(g, s.data() + i, sizeof g);
            i += sizeof g;
            if (!(g[0] >= 0 && g[1] >= 0 && g[3] >= 0 && g[3] <= 0x7fff)) return false;
            if (grants) grants->push_back({g[0], g[1], g[2], static_cast<int>(g[3])});
        }
    }
    return true;
}

bool fits_chain(const chain_decision& d, const std::vector<layer_ref>& refs,
                std::span<const lease_grant> grants) {
    const auto n = static_cast<int>(refs.size());
    auto rules_of = [&refs](int layer) {
        return static_cast<int>(refs[static_cast<std::size_t>(layer)].spec->rules.size());
    };
    if (d.decider < -1 || d.decider >= n || (!d.allowed && d.decider < 0)) return false;
    if (d.header_layer < -1 || d.header_layer >= n) return false;
    // The rule belongs to the header layer (the decider's when refused).
    if (d.header_layer >= 0 && (d.rule < 0 || d.rule >= rules_of(d.header_layer))) return false;
    if (n < 32 && (d.shadow_mask >> n) != 0) return false;
    std::size_t g = 0;
    for (int i = 0; i < n; ++i) {
        if (refs[static_cast<std::size_t>(i)].lease.want <= 0) continue;
        if (g == grants.size()) return false;
        if (grants[g].rule >= rules_of(i)) return false;
        ++g;
    }
    return g == grants.size();
}

}  // namespace rategate::limiters
