// Small sans-I/O text rules of HTTP (RFC 9110 §5.1, §5.6.3) shared by the request path's
// parsers: ASCII case-insensitive comparison of field names and tokens, and optional
// whitespace (SP / HTAB) trimmed from a field value or list element.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rategate::gateway::h1 {

/// ASCII lower case of one byte; other bytes unchanged (no locale).
constexpr char ascii_lower(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

/// `s` in ASCII lower case (HTTP/2 field names, RFC 9113 §8.2.1).
inline std::string ascii_lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out)
        c = ascii_lower(c);
    return out;
}

/// True when `a` and `b` are equal ignoring ASCII case (field names, tokens, schemes).
constexpr bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
    return true;
}

/// True for an RFC 9110 §5.6.2 tchar: the bytes of a token, such as a field name.
constexpr bool is_tchar(char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
    switch (c) {
        case '!':
        case '#':
        case '$':
        case '%':
        case '&':
        case '\'':
        case '*':
        case '+':
        case '-':
        case '.':
        case '^':
        case '_':
        case '`':
        case '|':
        case '~':
            return true;
        default:
            return false;
    }
}

/// True for optional whitespace (OWS): SP or HTAB.
constexpr bool is_ows(char c) {
    return c == ' ' || c == '\t';
}

/// `s` without leading and trailing OWS.
constexpr std::string_view trim(std::string_view s) {
    while (!s.empty() && is_ows(s.front()))
        s.remove_prefix(1);
    while (!s.empty() && is_ows(s.back()))
        s.remove_suffix(1);
    return s;
}

/// Calls `f(element)` for each non-empty element of a comma-separated field value, OWS
/// trimmed (RFC 9110 §5.6.1 list syntax: empty elements are skipped).
template <class F>
constexpr void for_each_element(std::string_view list, F&& f) {
    for (;;) {
        auto comma = list.find(',');
        if (auto element = trim(list.substr(0, comma)); !element.empty()) f(element);
        if (comma == std::string_view::npos) return;
        list.remove_prefix(comma + 1);
    }
}

}  // namespace rategate::gateway::h1
