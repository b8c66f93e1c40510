// gateway/http/response_head (the upstream's response head, parsed in place) and the flat
// rewrites of gateway/proxy/header_rewrite that write heads with no field container, held to
// the field-container rewrites they replace on the request path.
#include <doctest/doctest.h>

#include <algorithm>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <string>
#include <vector>

#include "gateway/http/http_head.hpp"
#include "gateway/http/response_head.hpp"
#include "gateway/http/router.hpp"
#include "gateway/http/text.hpp"
#include "gateway/proxy/header_rewrite.hpp"

namespace http = boost::beast::http;
using namespace rategate::gateway;
namespace config = rategate::config;
using state = h1::head_parse::state;

namespace {

h1::head_parse parse(std::string_view bytes, h1::response_head& out, std::size_t max_bytes = 8192) {
    return h1::parse_response_head(bytes, max_bytes, out);
}

const char* malformed_reason(std::string_view bytes) {
    h1::response_head head;
    auto r = parse(bytes, head);
    return r.status == state::malformed ? r.reason : "";
}

// The field lines of a serialized head (after its first line), sorted: order-free comparison.
std::vector<std::string> field_lines(const std::string& head) {
    std::vector<std::string> lines;
    auto at = head.find("\r\n") + 2;
    for (auto eol = head.find("\r\n", at); eol != std::string::npos && eol != at;
         at = eol + 2, eol = head.find("\r\n", at))
        lines.push_back(head.substr(at, eol - at));
    std::sort(lines.begin(), lines.end());
    return lines;
}

}  // namespace

TEST_CASE("a response head parses into status, reason, fields and framing facts") {
    std::string bytes =
        "HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 12\r\nConnection: keep-alive\r\n"
        "X-Empty:\r\nX-Pad:  padded value \t\r\n\r\nbody follows";
    h1::response_head head;
    auto r = parse(bytes, head);
    REQUIRE(r.status == state::complete);
    CHECK(head.version == 11);
    CHECK(head.status == 200);
    CHECK(head.reason == "OK");
    CHECK(head.length == bytes.find("body"));
    REQUIRE(head.fields.size() == 5);
    CHECK(head.fields[0].name == "Server");
    CHECK(head.fields[3].value == "");
    CHECK(head.fields[4].value == "padded value");
    CHECK(head.content_length == 12u);
    CHECK(head.sized());
    CHECK(head.keep_alive());
    CHECK_FALSE(head.transfer_encoding);
}

TEST_CASE("status lines: versions, reasonless, and what is refused") {
    h1::response_head head;
    REQUIRE(parse("HTTP/1.0 404 Not Found\r\n\r\n", head).status == state::complete);
    CHECK(head.version == 10);
    CHECK(head.status == 404);
    CHECK_FALSE(head.keep_alive());  // HTTP/1.0 without keep-alive
    REQUIRE(parse("HTTP/1.1 204\r\n\r\n", head).status == state::complete);
    CHECK(head.reason.empty());
    REQUIRE(parse("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n\r\n", head).status ==
            state::complete);
    CHECK(head.keep_alive());
    REQUIRE(parse("HTTP/1.1 200 OK\r\nConnection: foo, close\r\n\r\n", head).status ==
            state::complete);
    CHECK_FALSE(head.keep_alive());
    for (auto bad : {"HTTP/2 200 OK\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 2000\r\n\r\n",
                     "HTTP/1.1 099 Low\r\n\r\n", "HTTP/1.2 200 OK\r\n\r\n", "http/1.1 200\r\n\r\n",
                     "HTTP/1.1  200 OK\r\n\r\n"})
        CHECK(std::string_view(malformed_reason(bad)).find("status") != std::string_view::npos);
    CHECK(std::string_view(malformed_reason("\r\n\r\n")) == "empty status line");
}

TEST_CASE("smuggling vectors and bad bytes in a response head are malformed") {
    CHECK(std::string_view(malformed_reason("HTTP/1.1 200 OK\r\nA: 1\nB: 2\r\n\r\n")) ==
          "bare LF in header");
    CHECK(std::string_view(malformed_reason("HTTP/1.1 200 OK\r\nA: 1\rB: 2\r\n\r\n")) ==
          "bare CR in header");
    CHECK(std::string_view(malformed_reason(std::string("HTTP/1.1 200 OK\r\nA: \0\r\n\r\n", 26))) ==
          "NUL in header");
    CHECK(std::string_view(malformed_reason("HTTP/1.1 200 OK\r\nA: \x01\r\n\r\n")) ==
          "control byte in header");
    CHECK(std::string_view(malformed_reason("HTTP/1.1 200 OK\r\nA: 1\r\n folded\r\n\r\n")) ==
          "obsolete line folding in header");
    CHECK(std::string_view(malformed_reason("HTTP/1.1 200 OK\r\nBad Name: 1\r\n\r\n")) ==
          "field name is not a token");
    CHECK(std::string_view(malformed_reason("HTTP/1.1 200 OK\r\nName : 1\r\n\r\n")) ==
          "field name is not a token");
    CHECK(std::string_view(malformed_reason("HTTP/1.1 200 OK\r\n: 1\r\n\r\n")) ==
          "header line without a field name");
    CHECK(std::string_view(malformed_reason("HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n")) ==
          "invalid Content-Length");
    CHECK(std::string_view(malformed_reason("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n")) ==
          "invalid Content-Length");
    CHECK(std::string_view(malformed_reason(
              "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")) ==
          "conflicting Content-Length");
    h1::response_head head;
    REQUIRE(
        parse("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", head).status ==
        state::complete);
    CHECK(head.content_length == 3u);
    // Both Content-Length and Transfer-Encoding, in either order, whatever the coding: an error
    // (RFC 9112 §6.3), never framed one way here and another way by the upstream.
    for (auto both : {"Content-Length: 3\r\nTransfer-Encoding: gzip, chunked\r\n",
                      "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
                      "Content-Length: 3\r\nTransfer-Encoding: gzip\r\n"})
        CHECK(std::string_view(
                  malformed_reason("HTTP/1.1 200 OK\r\n" + std::string(both) + "\r\n")) ==
              "Content-Length with Transfer-Encoding");
    REQUIRE(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", head).status ==
            state::complete);
    CHECK(head.chunked);
    CHECK_FALSE(head.sized());
    REQUIRE(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", head).status ==
            state::complete);
    CHECK(head.transfer_encoding);
    CHECK_FALSE(head.chunked);
}

TEST_CASE("every prefix of a good head is incomplete, never malformed; the limit is too_large") {
    std::string bytes =
        "HTTP/1.1 301 Moved\r\nLocation: /x\r\nContent-Length: 0\r\nVia: 1.1 a\r\n\r\n";
    h1::response_head head;
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        CAPTURE(n);
        CHECK(parse(bytes.substr(0, n), head).status == state::incomplete);
    }
    CHECK(parse(bytes, head).status == state::complete);
    CHECK(parse(bytes, head, bytes.size() - 1).status == state::too_large);
    CHECK(parse(bytes, head, bytes.size()).status == state::complete);
}

TEST_CASE("the flat response rewrite writes what the field-container rewrite writes") {
    const rate_headers ours{"per-user", 100, 60, 7, 30};
    struct row {
        const char* head;
        h1::body_framing framing;
        unsigned client_version;
        bool keep_alive;
        const rate_headers* rate;
    };
    const row rows[] = {
        {"HTTP/1.1 200 OK\r\nServer: s\r\nContent-Length: 2\r\nConnection: keep-alive, X-In\r\n"
         "X-In: secret\r\nVia: 1.0 a\r\nVia: 1.1 b\r\nKeep-Alive: timeout=5\r\n\r\n",
         h1::body_framing::sized, 11, true, nullptr},
        {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Request-Id: theirs\r\n\r\n",
         h1::body_framing::sized, 10, true, &ours},
        {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-RateLimit-Remaining: 3\r\n\r\n",
         h1::body_framing::sized, 11, false, &ours},  // the backend's stricter count stays
        {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-RateLimit-Remaining: 50\r\nRateLimit: x\r\n"
         "\r\n",
         h1::body_framing::sized, 11, true, &ours},  // ours replace the looser ones
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nUpgrade: h2c\r\n\r\n",
         h1::body_framing::chunked, 11, true, nullptr},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", h1::body_framing::close_delimited,
         10, false, nullptr},
        {"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", h1::body_framing::none,
         10, true, nullptr},
        {"HTTP/1.1 200 OK\r\nTE: trailers\r\nTrailer: X-T\r\n\r\n", h1::body_framing::chunked, 11,
         true, nullptr},
    };
    for (const auto& r : rows) {
        CAPTURE(r.head);
        h1::response_head flat;
        REQUIRE(parse(r.head, flat).status == state::complete);
        std::string mine;
        append_response_head(mine, flat,
                             {.request_id = "rid",
                              .client_version = r.client_version,
                              .keep_alive = r.keep_alive,
                              .framing = r.framing,
                              .rate = r.rate,
                              .rate_style = config::header_style::both});

        // The field-container way: Beast's parser, the rewrites, the framing edits, Beast's
        // keep_alive() and the serializer.
        http::response_parser<http::string_body> p;
        p.skip(true);
        boost::system::error_code ec;
        p.put(boost::asio::buffer(std::string_view(r.head)), ec);
        REQUIRE_FALSE(ec);
        auto res = p.release();
        rewrite_response_headers(res, "rid");
        if (r.rate) apply_rate_headers(res, config::header_style::both, *r.rate, true);
        if (r.framing == h1::body_framing::none && r.client_version < 11)
            res.erase(http::field::transfer_encoding);
        if (r.framing == h1::body_framing::chunked) {
            res.chunked(true);
            res.erase(http::field::content_length);
        }
        if (r.framing == h1::body_framing::close_delimited) {
            res.erase(http::field::transfer_encoding);
            res.erase(http::field::content_length);
        }
        res.version(r.client_version);
        res.keep_alive(r.keep_alive);
        std::string theirs;
        append_response_head(theirs, res.base());
        CHECK(mine.substr(0, mine.find("\r\n")) == theirs.substr(0, theirs.find("\r\n")));
        CHECK(field_lines(mine) == field_lines(theirs));
    }
}

TEST_CASE("a WebSocket 101 keeps Upgrade and Connection for the handshake only") {
    h1::response_head flat;
    REQUIRE(parse("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: "
                  "Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n",
                  flat)
                .status == state::complete);
    std::string out;
    append_response_head(out, flat, {.request_id = "rid", .websocket = true});
    CHECK(field_lines(out) ==
          std::vector<std::string>{"Connection: Upgrade", "Sec-WebSocket-Accept: x",
                                   "Upgrade: websocket", "Via: 1.1 rategate", "X-Request-Id: rid"});
}

TEST_CASE("the flat request head is byte for byte the rewritten field container's") {
    const char* requests[] = {
        "GET /api/items?x=1 HTTP/1.0\r\nHost: api\r\nConnection: Keep-Alive, X-Hop\r\nX-Hop: 1\r\n"
        "User-Agent: ab\r\nAccept: */*\r\n\r\n",
        "POST /api/orders HTTP/1.1\r\nHost: api\r\nX-Forwarded-For: 1.2.3.4\r\nVia: 1.0 edge\r\n"
        "X-Forwarded-For: 5.6.7.8, 9.9.9.9\r\nX-Forwarded-Proto: https\r\nX-Request-Id: mine\r\n"
        "Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
        "GET / HTTP/1.1\r\nX-Request-Id: \r\nX-Request-Id: second\r\nTE: trailers\r\n\r\n",
    };
    for (const char* text : requests) {
        CAPTURE(text);
        auto parsed = [&] {
            http::request_parser<http::empty_body> p;
            boost::system::error_code ec;
            p.put(boost::asio::buffer(std::string_view(text)), ec);
            REQUIRE(p.is_header_done());
            return p.release();
        };
        auto a = parsed(), b = parsed();
        std::string mine;
        auto id =
            append_forwarded_request_head(mine, a, {"10.0.0.1", "https"}, "/api", false, "fresh");
        auto their_id = rewrite_request_headers(b, {"10.0.0.1", "https"}, "fresh");
        b.target(strip_path_prefix(b.target(), "/api"));
        b.version(11);
        b.keep_alive(true);
        std::string theirs;
        append_request_head(theirs, b);
        CHECK(id == their_id);
        CHECK(mine == theirs);
    }
}

TEST_CASE("the eight-byte scans find the byte the one-byte rules would, at every offset") {
    using rategate::gateway::h1::find_line_stop;
    using rategate::gateway::h1::find_non_value;
    auto line_stop = [](char c) { return c == '\r' || c == '\n' || c == '\0'; };
    auto non_value = [](char c) {
        auto u = static_cast<unsigned char>(c);
        return !((u >= 0x20 && u != 0x7f) || u == '\t');
    };
    auto first = [](const std::string& s, std::size_t from, auto pred) {
        for (std::size_t k = from; k < s.size(); ++k)
            if (pred(s[k])) return k;
        return s.size();
    };
    auto agree = [&](const std::string& s) {
        for (std::size_t from = 0; from <= s.size(); ++from) {
            REQUIRE(find_line_stop(s, from) == first(s, from, line_stop));
            REQUIRE(find_non_value(s, from) == first(s, from, non_value));
        }
    };
    // Every byte value at every position of strings that cross one, two and three words, alone
    // and after an HTAB (allowed in a value, so the scan goes on past it).
    for (std::size_t len : {1u, 7u, 8u, 9u, 16u, 23u}) {
        for (std::size_t at = 0; at < len; ++at) {
            for (int b = 0; b < 256; ++b) {
                std::string s(len, 'a');
                s[at] = static_cast<char>(b);
                agree(s);
                for (std::size_t tab = 0; tab < at; tab += 3) {
                    auto t = s;
                    t[tab] = '\t';
                    agree(t);
                }
            }
        }
    }
}

TEST_CASE("rate-limit field values: sf-string names escaped, integers cut and floored at 0") {
    struct row {
        rate_headers h;
        rate_field f;
        std::string_view want;
    };
    const row rows[] = {
        {{"per-user", 100, 60, 7, 30}, rate_field::policy, R"("per-user";q=100;w=60)"},
        {{"per-user", 100, 60, 7, 30}, rate_field::ratelimit, R"("per-user";r=7;t=30)"},
        {{R"(a"b\c)", 5, 0.5, -1, 2}, rate_field::policy, R"("a\"b\\c";q=5;w=1)"},
        {{R"(\)", 5, 1.5, 2.9, 0}, rate_field::ratelimit, R"("\\";r=2;t=0)"},
        {{R"("")", 5, 1, 0, 0}, rate_field::ratelimit, R"("\"\"";r=0;t=0)"},
        {{"x", 12.7, 1, -3, 4}, rate_field::limit, "12"},
        {{"x", 12, 1, -3, 4}, rate_field::remaining, "0"},
        {{"x", 12, 1, 3, 4}, rate_field::reset, "4"},
    };
    for (const auto& r : rows) {
        std::string out = "prefix:";
        append_rate_value(out, r.f, r.h);
        CHECK(out == "prefix:" + std::string(r.want));
    }
}
