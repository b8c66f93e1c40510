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
    // Fields named by Connection are hop-by-hop too; collect before erasing.
    std::vector<std::string> named;
    for (auto it = f.find(http::field::connection);
         it != f.end() && it->name() == http::field::connection; ++it)
        for (auto token : http::token_list{it->value()})
            named.emplace_back(token);
    for (const auto& n : named) {
        // Never let a client strip our framing through Connection.
        if (boost::beast::iequals(n, "content-length") ||
            boost::beast::iequals(n, "transfer-encoding") || boost::beast::iequals(n, "host"))
            continue;
        f.erase(n);
    }
    for (auto name :
         {http::field::connection, http::field::keep_alive, http::field::proxy_connection,
          http::field::te, http::field::trailer, http::field::upgrade, http::field::expect})
        f.erase(name);
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
