// GET /top (SPEC §4): the keys limited most over the last minutes, merged from every event
// loop's Space-Saving sketches (top_keys.hpp) and named as the operator knows them: the
// limiter and the key's identity parts, unescaped.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/admin/metrics.hpp"
#include "gateway/admin/top_keys.hpp"

namespace rategate::gateway {

namespace {

// %XX escapes of a key part back to bytes, for display (limiters/keys.cpp escapes them).
std::string unescape_key_part(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size()) {
            auto hex = [](char c) {
                return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            };
            int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
            if (hi >= 0 && lo >= 0) {
                out += static_cast<char>(hi * 16 + lo);
                i += 2;
                continue;
            }
        }
        out += s[i];
    }
    return out;
}

}  // namespace

std::string render_top_json(const std::vector<const loop_metrics*>& loops,
                            std::string_view key_prefix, std::size_t limit) {
    admin::space_saving merged(256);
    for (const auto* l : loops)
        merged.merge(l->top());
    auto out = nlohmann::json::array();
    for (const auto& e : merged.top()) {
        if (out.size() >= limit) break;
        // Layer keys are PREFIX{LIMITER} and PREFIX LIMITER|{PARTS} (limiters/keys.hpp).
        std::string_view k = e.item;
        if (k.starts_with(key_prefix)) k.remove_prefix(key_prefix.size());
        if (k.starts_with('{')) k.remove_prefix(1);
        if (k.ends_with('}')) k.remove_suffix(1);
        auto bar = k.find('|');
        auto name = k.substr(0, bar);
        name = name.substr(0, name.find('~'));  // the shape tag follows the name
        std::string limiter = unescape_key_part(name);
        std::string parts;
        if (bar != std::string_view::npos) {
            auto rest = k.substr(bar + 1);
            if (rest.starts_with('{')) rest.remove_prefix(1);
            parts = std::string(rest);
        }
        out.push_back({{"limiter", limiter},
                       {"key", parts.empty() ? "(global)" : parts},
                       {"limited", e.count}});
    }
    return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace rategate::gateway
