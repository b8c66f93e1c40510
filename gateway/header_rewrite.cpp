#include "gateway/header_rewrite.hpp"

#include <boost/beast/http/rfc7230.hpp>
#include <random>
#include <vector>

namespace rategate::gateway {

namespace http = boost::beast::http;

namespace {
constexpr std::string_view via_value = "1.1 rategate";

template <class Name>
void append_list(http::fields& f, Name name, std::string_view value) {
    auto it = f.find(name);
    if (it == f.end()) {
        f.set(name, value);
        return;
    }
    std::string joined(it->value());
    joined += ", ";
    joined += value;
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
    append_list(f, "X-Forwarded-For", client.peer_ip);
    f.set("X-Forwarded-Proto", client.proto);
    if (auto host = f.find(http::field::host); host != f.end())
        f.set("X-Forwarded-Host", host->value());
    else
        f.erase("X-Forwarded-Host");
    append_list(f, http::field::via, via_value);
    auto id = f.find("X-Request-Id");
    if (id != f.end() && !id->value().empty() && id->value().size() <= 200)
        return std::string(id->value());
    f.set("X-Request-Id", new_request_id);
    return std::string(new_request_id);
}

void rewrite_response_headers(http::fields& f, std::string_view request_id) {
    remove_hop_by_hop(f);
    append_list(f, http::field::via, via_value);
    if (f.find("X-Request-Id") == f.end()) f.set("X-Request-Id", request_id);
}

std::string make_request_id() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    static constexpr char hex[] = "0123456789abcdef";
    std::string out(32, '0');
    for (int half = 0; half < 2; ++half) {
        auto v = rng();
        for (int i = 0; i < 16; ++i)
            out[half * 16 + i] = hex[(v >> (i * 4)) & 0xf];
    }
    return out;
}

}  // namespace rategate::gateway
