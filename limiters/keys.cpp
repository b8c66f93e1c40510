#include "limiters/keys.hpp"

namespace rategate::limiters {

std::string escape_key_part(std::string_view value) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(value.size());
    for (unsigned char c : value) {
        bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                     c == '.' || c == '_' || c == '-';
        if (plain) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

std::string layer_key(std::string_view prefix, std::string_view limiter, std::string_view parts) {
    std::string key;
    key.reserve(prefix.size() + limiter.size() + parts.size() + 4);
    key += prefix;
    key += '{';
    key += escape_key_part(limiter);
    if (!parts.empty()) {
        key += '|';
        key += parts;
    }
    key += '}';
    return key;
}

}  // namespace rategate::limiters
