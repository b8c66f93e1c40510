#include "gateway/proxy/header_rewrite.hpp"

#include <array>
#include <boost/beast/http/rfc7230.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gateway/http/text.hpp"

namespace rategate::gateway {

namespace http = boost::beast::http;

namespace {
constexpr std::string_view via_value = "1.1 rategate";

using h1::trim;

// Replaces every field line of `name` by one: all their list elements in order (RFC 9110 §5.3),
// then `value`, joined with ", ". With `split`, each line is split at ',' and empty elements
// dropped (X-Forwarded-For); without, each non-empty line is kept whole (Via, whose comments may
// hold commas).
template <class Name>
void append_list(http::fields& f, Name name, std::string_view value, bool split) {
    std::string joined;
    auto add = [&joined](std::string_view element) {
        element = trim(element);
        if (element.empty()) return;
        if (!joined.empty()) joined += ", ";
        joined += element;
    };
    for (auto [it, end] = f.equal_range(name); it != end; ++it) {
        std::string_view line = it->value();
        if (!split) {
            add(line);
            continue;
        }
        for (auto comma = line.find(','); comma != std::string_view::npos; comma = line.find(',')) {
            add(line.substr(0, comma));
            line.remove_prefix(comma + 1);
        }
        add(line);
    }
    add(value);
    f.set(name, joined);
}
}  // namespace

void remove_hop_by_hop(http::fields& f) {
    // Fields named by Connection are hop-by-hop too (rare: only then is a list built).
    std::vector<std::string> named;  // copies: the Connection field itself is erased below
    for (auto it = f.find(http::field::connection);
         it != f.end() && it->name() == http::field::connection; ++it)
        for (auto token : http::token_list{it->value()})
            named.emplace_back(token);
    // One pass over the fields instead of one lookup per hop-by-hop name.
    for (auto it = f.begin(); it != f.end();) {
        bool hop = false;
        switch (it->name()) {
            case http::field::connection:
            case http::field::keep_alive:
            case http::field::proxy_connection:
            case http::field::te:
            case http::field::trailer:
            case http::field::upgrade:
            case http::field::expect:
                hop = true;
                break;
            // Never let a client strip our framing or Host through Connection.
            case http::field::content_length:
            case http::field::transfer_encoding:
            case http::field::host:
                break;
            default:
                for (const auto& n : named)
                    if (boost::beast::iequals(n, it->name_string())) hop = true;
        }
        it = hop ? f.erase(it) : std::next(it);
    }
}

std::string rewrite_request_headers(http::fields& f, const client_info& client,
                                    std::string_view new_request_id) {
    remove_hop_by_hop(f);
    append_list(f, "X-Forwarded-For", client.peer_ip, true);
    f.set("X-Forwarded-Proto", client.proto);
    if (auto host = f.find(http::field::host); host != f.end())
        f.set("X-Forwarded-Host", host->value());
    else
        f.erase("X-Forwarded-Host");
    append_list(f, http::field::via, via_value, false);
    auto id = f.find("X-Request-Id");
    if (id != f.end() && !id->value().empty() && id->value().size() <= 200)
        return std::string(id->value());
    f.set("X-Request-Id", new_request_id);
    return std::string(new_request_id);
}

void rewrite_response_headers(http::fields& f, std::string_view request_id) {
    remove_hop_by_hop(f);
    append_list(f, http::field::via, via_value, false);
    if (f.find("X-Request-Id") == f.end()) f.set("X-Request-Id", request_id);
}

std::string make_request_id() {
    // SplitMix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators", 2014)
    // from a per-thread random seed: an id, not a secret, so a few instructions per request.
    thread_local std::uint64_t state = std::random_device{}() * 0x9e3779b97f4a7c15ull ^
                                       (std::uint64_t{std::random_device{}()} << 32);
    auto next = [] {
        std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    };
    // Two hex digits per byte from one table: 16 lookups instead of 32 shifts and masks.
    static constexpr auto pairs = [] {
        std::array<char, 512> t{};
        constexpr char hex[] = "0123456789abcdef";
        for (int b = 0; b < 256; ++b) {
            t[static_cast<std::size_t>(2 * b)] = hex[b >> 4];
            t[static_cast<std::size_t>(2 * b + 1)] = hex[b & 0xf];
        }
        return t;
    }();
    std::string out(32, '0');
    for (int half = 0; half < 2; ++half) {
        auto v = next();
        for (int i = 0; i < 8; ++i, v >>= 8)
            std::memcpy(&out[static_cast<std::size_t>(half * 16 + 2 * i)], &pairs[2 * (v & 0xff)],
                        2);
    }
    return out;
}

}  // namespace rategate::gateway
