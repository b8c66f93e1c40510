#include "limiters/keys.hpp"

#include <array>
#include <cstdint>
#include <cstring>

namespace rategate::limiters {

std::string escape_key_part(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    append_escaped(out, value);
    return out;
}

void append_escaped(std::string& out, std::string_view value) {
    static constexpr char hex[] = "0123456789ABCDEF";
    static constexpr auto plain = [] {
        std::array<bool, 256> t{};
        for (int c = 0; c < 256; ++c)
            t[static_cast<std::size_t>(c)] = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                                             (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                                             c == '-';
        return t;
    }();
    // Runs of plain bytes go in one append each (an id is usually one run).
    std::size_t i = 0;
    while (i < value.size()) {
        std::size_t j = i;
        while (j < value.size() && plain[static_cast<unsigned char>(value[j])])
            ++j;
        out.append(value.data() + i, j - i);
        if (j == value.size()) break;
        auto c = static_cast<unsigned char>(value[j]);
        const char escaped[3] = {'%', hex[c >> 4], hex[c & 15]};
        out.append(escaped, 3);
        i = j + 1;
    }
}

std::string key_head(std::string_view prefix, std::string_view limiter, std::string_view shape) {
    std::string key;
    key.reserve(prefix.size() + limiter.size() + shape.size() + 2);
    key += prefix;
    append_escaped(key, limiter);
    if (!shape.empty()) {
        key += '~';
        key += shape;
    }
    return key;
}

std::string global_key(std::string_view prefix, std::string_view head) {
    std::string key;
    key.reserve(head.size() + 2);
    key += prefix;
    key += '{';
    key += head.substr(prefix.size());
    key += '}';
    return key;
}

std::string layer_key(std::string_view prefix, std::string_view limiter, std::string_view parts,
                      std::string_view shape) {
    std::string head = key_head(prefix, limiter, shape);
    if (parts.empty()) return global_key(prefix, head);
    head.reserve(head.size() + parts.size() + 3);
    head += "|{";
    head += parts;
    head += '}';
    return head;
}

std::string shape_tag(int algorithm_code, const std::vector<std::array<double, 4>>& rules,
                      bool reserving, int layout) {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a offset basis
    auto mix = [&h](const void* data, std::size_t n) {
        const auto* p = static_cast<const unsigned char*>(data);
        for (std::size_t i = 0; i < n; ++i) {
            h ^= p[i];
            h *= 1099511628211ull;  // FNV prime
        }
    };
    mix(&algorithm_code, sizeof algorithm_code);
    for (const auto& r : rules)
        for (double v : r) {
            std::uint64_t bits;
            std::memcpy(&bits, &v, sizeof bits);
            mix(&bits, sizeof bits);
        }
    if (reserving) {
        const char marker = 'r';
        mix(&marker, 1);
    }
    if (layout != 0) {
        const char marker = 'v';
        mix(&marker, 1);
        mix(&layout, sizeof layout);
    }
    auto folded = static_cast<std::uint32_t>(h ^ (h >> 32));
    static constexpr char hex[] = "0123456789abcdef";
    std::string out(8, '0');
    for (int i = 7; i >= 0; --i, folded >>= 4)
        out[static_cast<std::size_t>(i)] = hex[folded & 15];
    return out;
}

}  // namespace rategate::limiters
