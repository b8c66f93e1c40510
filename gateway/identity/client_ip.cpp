#include "gateway/identity/client_ip.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstring>

#include "gateway/http/text.hpp"

namespace rategate::gateway::identity {

namespace {

/// An address on the wire: IPv4 is kept in the first four bytes.
struct address {
    std::array<std::uint8_t, 16> bytes{};
    bool v4 = false;
};

using h1::is_ows;

using h1::trim;

bool is_digit(char ch) {
    return ch >= '0' && ch <= '9';
}

using h1::iequals;

// Four decimal octets 0..255, no leading zeros, nothing else.
bool parse_v4(std::string_view s, address& out) {
    int part = 0;
    while (part < 4) {
        std::size_t n = 0;
        unsigned value = 0;
        while (n < s.size() && n < 4 && is_digit(s[n]))
            value = value * 10 + static_cast<unsigned>(s[n++] - '0');
        if (n == 0 || n > 3 || value > 255 || (n > 1 && s[0] == '0')) return false;
        out.bytes[static_cast<std::size_t>(part++)] = static_cast<std::uint8_t>(value);
        s.remove_prefix(n);
        if (part < 4) {
            if (s.empty() || s.front() != '.') return false;
            s.remove_prefix(1);
        }
    }
    out.v4 = true;
    return s.empty();
}

bool is_v4_mapped(const std::array<std::uint8_t, 16>& b) {
    for (std::size_t i = 0; i < 10; ++i)
        if (b[i] != 0) return false;
    return b[10] == 0xff && b[11] == 0xff;
}

// IPv6 text (RFC 4291 §2.2) without brackets; a zone id (`%eth0`) is dropped. An IPv4-mapped
// address becomes IPv4.
bool parse_v6(std::string_view s, address& out) {
    if (auto pct = s.find('%'); pct != std::string_view::npos) {
        auto zone = s.substr(pct + 1);
        // RFC 6874 ZoneID: 1*( unreserved / pct-encoded ).
        if (zone.empty() || !std::all_of(zone.begin(), zone.end(), [](char ch) {
                return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.' ||
                       ch == '_' || ch == '~' || ch == '%';
            }))
            return false;
        s = s.substr(0, pct);
    }
    char text[INET6_ADDRSTRLEN];
    if (s.empty() || s.size() >= sizeof text) return false;
    std::memcpy(text, s.data(), s.size());
    text[s.size()] = '\0';
    if (inet_pton(AF_INET6, text, out.bytes.data()) != 1) return false;
    if (is_v4_mapped(out.bytes)) {
        std::memmove(out.bytes.data(), out.bytes.data() + 12, 4);
        std::fill(out.bytes.begin() + 4, out.bytes.end(), std::uint8_t{0});
        out.v4 = true;
    } else {
        out.v4 = false;
    }
    return true;
}

// A port after an address: 0..65535 in decimal, or an RFC 7239 §6.3 obfuscated port
// (`_` followed by ALPHA / DIGIT / "." / "_" / "-").
bool valid_port(std::string_view p) {
    if (!p.empty() && p.front() == '_')
        return p.size() > 1 && std::all_of(p.begin() + 1, p.end(), [](char ch) {
                   return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' ||
                          ch == '-';
               });
    if (p.empty() || p.size() > 5 || !std::all_of(p.begin(), p.end(), is_digit)) return false;
    unsigned v = 0;
    for (char ch : p)
        v = v * 10 + static_cast<unsigned>(ch - '0');
    return v <= 65535;
}

bool is_unspecified(const address& a) {
    auto n = a.v4 ? 4 : 16;
    return std::all_of(a.bytes.begin(), a.bytes.begin() + n, [](std::uint8_t b) { return b == 0; });
}

std::optional<address> parse_address_any(std::string_view text) {
    auto s = trim(text);
    if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = trim(s.substr(1, s.size() - 2));
    address a;
    if (s.empty()) return std::nullopt;
    if (s.front() == '[') {
        auto close = s.find(']');
        if (close == std::string_view::npos) return std::nullopt;
        auto rest = s.substr(close + 1);
        if (!rest.empty() && (rest.front() != ':' || !valid_port(rest.substr(1))))
            return std::nullopt;
        auto inner = s.substr(1, close - 1);
        // An IP-literal holds IPv6 only (RFC 3986 §3.2.2); `[1.2.3.4]` is not an address.
        if (inner.find(':') == std::string_view::npos || !parse_v6(inner, a)) return std::nullopt;
        return a;
    }
    auto colons = std::count(s.begin(), s.end(), ':');
    if (colons == 0) return parse_v4(s, a) ? std::optional(a) : std::nullopt;
    if (colons == 1) {
        auto colon = s.find(':');
        if (!valid_port(s.substr(colon + 1)) || !parse_v4(s.substr(0, colon), a))
            return std::nullopt;
        return a;
    }
    return parse_v6(s, a) ? std::optional(a) : std::nullopt;
}

// An address that can name a client: not the unspecified one (`0.0.0.0`, `::`, `::ffff:0.0.0.0`).
std::optional<address> parse_address(std::string_view text) {
    auto a = parse_address_any(text);
    if (a && is_unspecified(*a)) return std::nullopt;
    return a;
}

// RFC 5952 §4: lower case hex, no leading zeros, "::" for the longest run of two or more zero
// groups (the first such run on a tie).
std::string format(const address& a) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    if (a.v4) {
        for (std::size_t i = 0; i < 4; ++i) {
            if (i) out += '.';
            out += std::to_string(a.bytes[i]);
        }
        return out;
    }
    std::array<unsigned, 8> g{};
    for (std::size_t i = 0; i < 8; ++i)
        g[i] = (unsigned{a.bytes[2 * i]} << 8) | a.bytes[2 * i + 1];
    int best = -1, best_len = 0;
    for (int i = 0; i < 8;) {
        if (g[static_cast<std::size_t>(i)] != 0) {
            ++i;
            continue;
        }
        int j = i;
        while (j < 8 && g[static_cast<std::size_t>(j)] == 0)
            ++j;
        if (j - i > best_len && j - i >= 2) best = i, best_len = j - i;
        i = j;
    }
    for (int i = 0; i < 8; ++i) {
        if (i == best) {
            out += "::";
            i += best_len - 1;
            continue;
        }
        if (i && i != best + best_len) out += ':';
        auto v = g[static_cast<std::size_t>(i)];
        bool started = false;
        for (int shift = 12; shift >= 0; shift -= 4) {
            auto d = (v >> shift) & 0xf;
            if (d || started || shift == 0) out += hex[d], started = true;
        }
    }
    return out;
}

bool contains(const config::cidr& block, const address& a) {
    const std::uint8_t* net = block.bytes.data();
    int bits = block.prefix;
    if (a.v4) {
        // IPv4 matches IPv4 blocks and blocks inside ::ffff:0:0/96 (IPv4-mapped).
        if (block.bytes.size() == 16) {
            std::array<std::uint8_t, 16> b{};
            std::copy(block.bytes.begin(), block.bytes.end(), b.begin());
            if (block.prefix < 96 || !is_v4_mapped(b)) return false;
            net += 12;
            bits -= 96;
        } else if (block.bytes.size() != 4) {
            return false;
        }
    } else if (block.bytes.size() != 16) {
        return false;
    }
    for (std::size_t i = 0; bits > 0; ++i, bits -= 8) {
        auto mask = bits >= 8 ? 0xff : static_cast<std::uint8_t>(0xff << (8 - bits));
        if ((a.bytes[i] & mask) != (net[i] & mask)) return false;
    }
    return true;
}

// Whether the hop `position` places from the right (0: the peer, 1: the right-most entry) at
// address `a` is trusted: by position (trusted_hops) or by its block (trusted_proxies).
bool trusted(const address& a, std::size_t position, const settings& s) {
    if (position < s.trusted_hops) return true;
    if (!s.trusted_proxies) return false;
    return std::any_of(s.trusted_proxies->begin(), s.trusted_proxies->end(),
                       [&](const config::cidr& b) { return contains(b, a); });
}

bool is_token(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), h1::is_tchar);
}

// Splits `s` at every `sep`. Quoted-strings are not honoured on purpose: no value RFC 7239
// defines (node, host, proto) may hold ',' or ';', and an unbalanced quote sent by a client must
// not swallow the entries its proxies append to the same line.
std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    for (;;) {
        auto at = s.find(sep);
        out.push_back(s.substr(0, at));
        if (at == std::string_view::npos) return out;
        s.remove_prefix(at + 1);
    }
}

// The `for` node of one RFC 7239 element, unquoted, or nullopt when the element has no `for` or
// is outside RFC 7239 §4's grammar: forwarded-pair = token "=" value, value = token /
// quoted-string, each parameter at most once. So no whitespace around '=', and an IPv6
// address or a port must be quoted (':' and '[' are not tchar). Whitespace around ';' is
// tolerated, as around ','.
std::optional<std::string> forwarded_for(std::string_view element) {
    std::optional<std::string> node;
    std::vector<std::string_view> seen;
    for (auto pair : split(element, ';')) {
        pair = trim(pair);
        if (pair.empty()) continue;
        auto eq = pair.find('=');
        if (eq == std::string_view::npos) return std::nullopt;
        auto name = pair.substr(0, eq);
        auto value = pair.substr(eq + 1);
        if (!is_token(name) || value.empty()) return std::nullopt;
        for (auto other : seen)
            if (iequals(other, name)) return std::nullopt;  // once per element (§4)
        seen.push_back(name);
        std::string v;
        if (value.front() == '"') {
            // quoted-string (RFC 9110 §5.6.4): the closing quote must end the value.
            std::size_t i = 1;
            bool closed = false;
            for (; i < value.size(); ++i) {
                if (value[i] == '\\' && i + 1 < value.size()) {
                    v += value[++i];
                } else if (value[i] == '"') {
                    closed = true;
                    break;
                } else {
                    v += value[i];
                }
            }
            if (!closed || i + 1 != value.size()) return std::nullopt;
        } else {
            if (!is_token(value)) return std::nullopt;
            v = std::string(value);
        }
        if (iequals(name, "for")) node = std::move(v);
    }
    return node;
}

// Appends the entries of one field line: an address, or nullopt for an entry that is not one.
void collect(std::string_view line, header_kind kind, std::vector<std::optional<address>>& out) {
    if (kind == header_kind::x_forwarded_for) {
        for (auto entry : split(line, ',')) {
            if (trim(entry).empty()) continue;  // empty list elements (RFC 9110 §5.6.1)
            out.push_back(parse_address(entry));
        }
        return;
    }
    for (auto element : split(line, ',')) {
        if (trim(element).empty()) continue;
        auto node = forwarded_for(element);
        out.push_back(node ? parse_address(*node) : std::nullopt);
    }
}

}  // namespace

std::optional<std::string> canonical_ip(std::string_view text) {
    auto a = parse_address(text);
    if (!a) return std::nullopt;
    return format(*a);
}

bool in_cidr(std::string_view ip, const config::cidr& block) {
    auto a = parse_address(ip);
    return a && contains(block, *a);
}

bool is_trusted(std::string_view ip, const std::vector<config::cidr>& blocks) {
    auto a = parse_address(ip);
    return a && std::any_of(blocks.begin(), blocks.end(),
                            [&](const config::cidr& b) { return contains(b, *a); });
}

header_kind kind_of(std::string_view name) {
    if (iequals(name, "X-Forwarded-For")) return header_kind::x_forwarded_for;
    if (iequals(name, "Forwarded")) return header_kind::forwarded;
    return header_kind::single;
}

settings settings::from(const config::identity_config& identity) {
    return {kind_of(identity.client_ip_header), &identity.trusted_proxies, identity.trusted_hops};
}

std::string resolve_client_ip(std::string_view peer,
                              const std::vector<std::string_view>& field_lines, const settings& s) {
    auto candidate = parse_address(peer);
    if (!candidate) return {};
    if (!trusted(*candidate, 0, s) || field_lines.empty()) return format(*candidate);
    std::vector<std::optional<address>> entries;
    if (s.header == header_kind::single) {
        // One address, on one line; anything else cannot be told apart from a forgery.
        entries.push_back(field_lines.size() == 1 ? parse_address(field_lines.front())
                                                  : std::nullopt);
    } else {
        for (auto line : field_lines)
            collect(line, s.header, entries);
    }
    // Every trusted hop vouches for the entry before it; a non-address stops the walk at the
    // hop that passed it on.
    std::size_t position = 0;
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        if (!*it) break;
        candidate = **it;
        if (!trusted(*candidate, ++position, s)) break;
    }
    return format(*candidate);
}

}  // namespace rategate::gateway::identity
