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

}  // namespace

namespace {

// The tokens of every Connection line: the fields it names are hop-by-hop too (copies: the
// Connection field itself is erased).
std::vector<std::string> connection_tokens(const http::fields& f) {
    std::vector<std::string> named;
    for (auto [it, end] = f.equal_range(http::field::connection); it != end; ++it)
        for (auto token : http::token_list{it->value()})
            named.emplace_back(token);
    return named;
}

// RFC 9110 §7.6.1: Connection, Keep-Alive, Proxy-Connection, TE, Trailer, Upgrade, Expect and
// whatever Connection names, except our framing and Host, which a client may never strip.
bool hop_by_hop(const http::fields::value_type& field, const std::vector<std::string>& named) {
    switch (field.name()) {
        case http::field::connection:
        case http::field::keep_alive:
        case http::field::proxy_connection:
        case http::field::te:
        case http::field::trailer:
        case http::field::upgrade:
        case http::field::expect:
            return true;
        case http::field::content_length:
        case http::field::transfer_encoding:
        case http::field::host:
            return false;
        default:
            for (const auto& n : named)
                if (boost::beast::iequals(n, field.name_string())) return true;
            return false;
    }
}

}  // namespace

namespace {

// The fields the rewrites read or replace, gathered in one pass over the field list.
enum class rewritten { none, forwarded_for, forwarded_proto, forwarded_host, request_id };

rewritten classify(const http::fields::value_type& field) {
    if (field.name() != http::field::unknown) return rewritten::none;
    auto n = field.name_string();
    if (n.size() == 15 && boost::beast::iequals(n, "X-Forwarded-For"))
        return rewritten::forwarded_for;
    if (n.size() == 17 && boost::beast::iequals(n, "X-Forwarded-Proto"))
        return rewritten::forwarded_proto;
    if (n.size() == 16 && boost::beast::iequals(n, "X-Forwarded-Host"))
        return rewritten::forwarded_host;
    if (n.size() == 12 && boost::beast::iequals(n, "X-Request-Id")) return rewritten::request_id;
    return rewritten::none;
}

// Appends the list elements of one field line to `joined` (", " between elements); `split`:
// at each ',' (X-Forwarded-For), else the line whole (Via, whose comments may hold commas).
void append_elements(std::string& joined, std::string_view line, bool split) {
    auto add = [&joined](std::string_view element) {
        element = trim(element);
        if (element.empty()) return;
        if (!joined.empty()) joined += ", ";
        joined += element;
    };
    if (!split) return add(line);
    for (auto comma = line.find(','); comma != std::string_view::npos; comma = line.find(',')) {
        add(line.substr(0, comma));
        line.remove_prefix(comma + 1);
    }
    add(line);
}

// One pass over `f`: hop-by-hop fields (and those Connection names) erased, Via lines merged
// into `via`, and for a request X-Forwarded-For lines merged into `forwarded_for`,
// X-Forwarded-Proto/-Host erased (they are set anew), the first Host and X-Request-Id values
// copied out. The same result as removing the hop-by-hop fields and then finding each name.
struct gathered {
    std::string forwarded_for, via, host, request_id;
    bool has_host = false, has_request_id = false;
};
gathered gather(http::fields& f, bool request) {
    gathered g;
    auto named = connection_tokens(f);
    for (auto it = f.begin(); it != f.end();) {
        bool drop = hop_by_hop(*it, named);
        if (drop) {
            // erased below
        } else if (it->name() == http::field::host) {
            if (!g.has_host) g.host = it->value(), g.has_host = true;
        } else if (it->name() == http::field::via) {
            append_elements(g.via, it->value(), false);
            drop = true;
        } else {
            switch (classify(*it)) {
                case rewritten::forwarded_for:
                    if (!request) break;
                    append_elements(g.forwarded_for, it->value(), true);
                    drop = true;
                    break;
                case rewritten::forwarded_proto:
                case rewritten::forwarded_host:
                    drop = request;
                    break;
                case rewritten::request_id:
                    if (!g.has_request_id) g.request_id = it->value(), g.has_request_id = true;
                    break;
                case rewritten::none:
                    break;
            }
        }
        it = drop ? f.erase(it) : std::next(it);
    }
    return g;
}

template <class MakeId>
std::string rewrite_request(http::fields& f, const client_info& client, MakeId&& make_id) {
    auto g = gather(f, true);
    append_elements(g.forwarded_for, client.peer_ip, true);
    f.insert("X-Forwarded-For", g.forwarded_for);
    f.insert("X-Forwarded-Proto", client.proto);
    if (g.has_host) f.insert("X-Forwarded-Host", g.host);
    append_elements(g.via, via_value, false);
    f.insert(http::field::via, g.via);
    if (g.has_request_id && !g.request_id.empty() && g.request_id.size() <= 200)
        return std::move(g.request_id);
    std::string id = make_id();
    if (g.has_request_id) f.erase("X-Request-Id");
    f.insert("X-Request-Id", id);
    return id;
}

}  // namespace

std::string rewrite_request_headers(http::fields& f, const client_info& client,
                                    std::string_view new_request_id) {
    return rewrite_request(f, client, [&] { return std::string(new_request_id); });
}

std::string rewrite_request_headers(http::fields& f, const client_info& client) {
    return rewrite_request(f, client, make_request_id);
}

void rewrite_response_headers(http::fields& f, std::string_view request_id) {
    auto g = gather(f, false);
    append_elements(g.via, via_value, false);
    f.insert(http::field::via, g.via);
    if (!g.has_request_id) f.insert("X-Request-Id", request_id);
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
