// Small sans-I/O text rules of HTTP (RFC 9110 §5.1, §5.6.3) shared by the request path's
// parsers: ASCII case-insensitive comparison of field names and tokens, and optional
// whitespace (SP / HTAB) trimmed from a field value or list element.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
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

/// Eight bytes at a time (SWAR, "SIMD within a register": Hacker's Delight §6-1, the
/// `haszero`/`hasless` tests of Anderson's Bit Twiddling Hacks). Each test is exact: nonzero
/// if and only if some byte of `w` matches.
namespace swar {
inline constexpr std::uint64_t ones = 0x0101010101010101ull;
inline constexpr std::uint64_t highs = 0x8080808080808080ull;
inline std::uint64_t load(const char* p) {
    std::uint64_t w;
    std::memcpy(&w, p, sizeof w);
    return w;
}
/// Some byte of `w` is below `n` (n <= 128).
constexpr std::uint64_t byte_below(std::uint64_t w, unsigned n) {
    return (w - ones * n) & ~w & highs;
}
/// Some byte of `w` equals `c`.
constexpr std::uint64_t byte_is(std::uint64_t w, unsigned char c) {
    return byte_below(w ^ (ones * c), 1);
}
}  // namespace swar

/// The index of the first CR, LF or NUL in `s` at or after `i`, or `s.size()`: where a head's
/// line ends, or the first byte that a line may not hold.
inline std::size_t find_line_stop(std::string_view s, std::size_t i) {
    const char* p = s.data();
    const std::size_t n = s.size();
    if constexpr (std::endian::native == std::endian::little) {
        for (; i + 8 <= n; i += 8) {
            auto w = swar::load(p + i);
            // The lowest flagged byte is a true match (a borrow only runs upward).
            if (auto m = swar::byte_is(w, '\r') | swar::byte_is(w, '\n') | swar::byte_is(w, 0))
                return i + static_cast<std::size_t>(std::countr_zero(m)) / 8;
        }
    }
    for (; i < n; ++i)
        if (p[i] == '\r' || p[i] == '\n' || p[i] == '\0') return i;
    return n;
}

/// The index of the first byte in `s` at or after `i` that a field value may not hold (RFC
/// 9110 §5.5: VCHAR, obs-text, SP and HTAB are allowed; other controls and DEL are not), or
/// `s.size()`.
inline std::size_t find_non_value(std::string_view s, std::size_t i) {
    const char* p = s.data();
    const std::size_t n = s.size();
    auto bad = [](char c) {
        auto u = static_cast<unsigned char>(c);
        return (u < 0x20 && u != '\t') || u == 0x7f;
    };
    if constexpr (std::endian::native == std::endian::little) {
        while (i + 8 <= n) {
            auto w = swar::load(p + i);
            auto m = swar::byte_below(w, 0x20) | swar::byte_is(w, 0x7f);
            if (!m) {
                i += 8;
                continue;
            }
            // The lowest flagged byte is a control or DEL; past an HTAB, one byte at a time.
            std::size_t k = i + static_cast<std::size_t>(std::countr_zero(m)) / 8;
            if (p[k] != '\t') return k;
            for (++k; k < i + 8; ++k)
                if (bad(p[k])) return k;
            i += 8;
        }
    }
    for (; i < n; ++i)
        if (bad(p[i])) return i;
    return n;
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
