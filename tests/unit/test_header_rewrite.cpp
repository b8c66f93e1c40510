#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "gateway/proxy/header_rewrite.hpp"

namespace http = boost::beast::http;
using namespace rategate::gateway;

namespace {
// The hop-by-hop removal of either direction's rewrite.
void rewrite(http::fields& f, bool request) {
    if (request)
        rewrite_request_headers(f, {"10.0.0.1", "http"}, "id");
    else
        rewrite_response_headers(f, "id");
}
}  // namespace

TEST_CASE("hop-by-hop fields and those named in Connection are removed, both ways") {
    for (bool request : {true, false}) {
        CAPTURE(request);
        http::fields f;
        f.set(http::field::connection, "keep-alive, X-Secret, Upgrade");
        f.set(http::field::keep_alive, "timeout=5");
        f.set("X-Secret", "s");
        f.set(http::field::upgrade, "websocket");
        f.set(http::field::te, "trailers");
        f.set(http::field::proxy_connection, "keep-alive");
        f.set(http::field::trailer, "X-T");
        f.set("X-Keep", "k");
        f.set(http::field::content_length, "5");
        rewrite(f, request);
        CHECK(f.find(http::field::connection) == f.end());
        CHECK(f.find(http::field::keep_alive) == f.end());
        CHECK(f.find("X-Secret") == f.end());
        CHECK(f.find(http::field::upgrade) == f.end());
        CHECK(f.find(http::field::te) == f.end());
        CHECK(f.find(http::field::proxy_connection) == f.end());
        CHECK(f.find(http::field::trailer) == f.end());
        CHECK(f["X-Keep"] == "k");
        CHECK(f[http::field::content_length] == "5");
    }
}

TEST_CASE("Connection cannot be used to strip framing fields") {
    for (bool request : {true, false}) {
        CAPTURE(request);
        http::fields f;
        f.set(http::field::connection, "Content-Length, Host");
        f.set(http::field::content_length, "5");
        f.set(http::field::host, "h");
        rewrite(f, request);
        CHECK(f[http::field::content_length] == "5");
        CHECK(f[http::field::host] == "h");
    }
}

TEST_CASE("request rewrite appends X-Forwarded-For and sets proto, host, Via, request id") {
    http::fields f;
    f.set(http::field::host, "api.example.com");
    f.set("X-Forwarded-For", "203.0.113.7");
    f.set("X-Forwarded-Proto", "https");
    f.set(http::field::via, "1.0 edge");
    auto id = rewrite_request_headers(f, {"10.0.0.1", "http"}, "abc");
    CHECK(f["X-Forwarded-For"] == "203.0.113.7, 10.0.0.1");
    CHECK(f["X-Forwarded-Proto"] == "http");
    CHECK(f["X-Forwarded-Host"] == "api.example.com");
    CHECK(f[http::field::via] == "1.0 edge, 1.1 rategate");
    CHECK(id == "abc");
    CHECK(f["X-Request-Id"] == "abc");
}

TEST_CASE("every X-Forwarded-For and Via line is kept, in order, as one line") {
    http::fields f;
    f.insert("X-Forwarded-For", "6.6.6.6");
    f.insert(http::field::via, "1.0 edge (comma, inside)");
    f.insert("X-Forwarded-For", " 7.7.7.7,8.8.8.8 ");
    f.insert(http::field::via, "1.1 lb");
    f.insert("X-Forwarded-For", "");
    f.insert("X-Forwarded-For", ", 127.0.0.3,,");
    rewrite_request_headers(f, {"127.0.0.2", "http"}, "abc");
    auto [xff, xff_end] = f.equal_range("X-Forwarded-For");
    REQUIRE(xff != xff_end);
    CHECK(xff->value() == "6.6.6.6, 7.7.7.7, 8.8.8.8, 127.0.0.3, 127.0.0.2");
    CHECK(std::next(xff) == xff_end);
    auto [via, via_end] = f.equal_range(http::field::via);
    REQUIRE(via != via_end);
    CHECK(via->value() == "1.0 edge (comma, inside), 1.1 lb, 1.1 rategate");
    CHECK(std::next(via) == via_end);
}

TEST_CASE("response rewrite merges every Via line") {
    http::fields f;
    f.insert(http::field::via, "1.1 a");
    f.insert(http::field::via, "1.1 b");
    rewrite_response_headers(f, "rid");
    CHECK(f.count(http::field::via) == 1);
    CHECK(f[http::field::via] == "1.1 a, 1.1 b, 1.1 rategate");
}

TEST_CASE("an incoming X-Request-Id is passed on") {
    http::fields f;
    f.set("X-Request-Id", "client-id-1");
    auto id = rewrite_request_headers(f, {"10.0.0.1", "http"}, "generated");
    CHECK(id == "client-id-1");
    CHECK(f["X-Request-Id"] == "client-id-1");
    CHECK(f["X-Forwarded-For"] == "10.0.0.1");
}

TEST_CASE("response rewrite strips hop-by-hop and adds Via and the request id") {
    http::fields f;
    f.set(http::field::connection, "close, X-Internal");
    f.set("X-Internal", "1");
    rewrite_response_headers(f, "rid");
    CHECK(f.find("X-Internal") == f.end());
    CHECK(f[http::field::via] == "1.1 rategate");
    CHECK(f["X-Request-Id"] == "rid");
}

TEST_CASE("request ids are 32 hex digits and differ") {
    auto a = make_request_id(), b = make_request_id();
    CHECK(a.size() == 32);
    CHECK(a != b);
    CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
    // 10,000 ids: all distinct, and every digit turns up at every position (no stuck nibble).
    std::set<std::string> seen;
    std::vector<std::set<char>> digits(32);
    for (int i = 0; i < 10000; ++i) {
        auto id = make_request_id();
        seen.insert(id);
        for (std::size_t p = 0; p < 32; ++p)
            digits[p].insert(id[p]);
    }
    CHECK(seen.size() == 10000);
    for (const auto& d : digits)
        CHECK(d.size() == 16);
}
