// gateway/proxy/request_facts: one walk over a request's fields gives what per-name lookups
// (Beast's keep_alive(), chunked(), operator[]) give.
#include <doctest/doctest.h>

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <string_view>

#include "gateway/proxy/request_facts.hpp"

namespace http = boost::beast::http;
using namespace rategate::gateway;

namespace {

http::request<http::empty_body> parse(std::string_view text) {
    http::request_parser<http::empty_body> p;
    boost::system::error_code ec;
    p.put(boost::asio::buffer(text), ec);
    REQUIRE(p.is_header_done());
    return p.release();
}

}  // namespace

TEST_CASE("request facts agree with Beast's lookups") {
    const char* heads[] = {
        "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET / HTTP/1.0\r\nHost: a\r\nConnection: Keep-Alive\r\n\r\n",
        "GET / HTTP/1.0\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, CLOSE\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\nExpect: 100-Continue\r\n"
        "Content-Type: application/grpc\r\n\r\n",
        "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: WebSocket\r\nConnection: keep-alive, "
        "Upgrade\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
    };
    for (const char* text : heads) {
        CAPTURE(text);
        auto req = parse(text);
        auto facts = read_request_facts(req);
        CHECK(facts.keep_alive(req.version()) == req.keep_alive());
        CHECK(facts.chunked == req.chunked());
        CHECK(facts.host == req[http::field::host]);
        CHECK(facts.host_count == req.count(http::field::host));
        CHECK(facts.content_type == req[http::field::content_type]);
        CHECK(facts.expect_continue ==
              boost::beast::iequals(req[http::field::expect], "100-continue"));
        CHECK(facts.upgrade_websocket ==
              boost::beast::iequals(req[http::field::upgrade], "websocket"));
        CHECK(facts.connection_upgrade ==
              http::token_list{req[http::field::connection]}.exists("upgrade"));
    }
}

TEST_CASE("every Connection line counts, and Host lines are counted") {
    auto req =
        parse("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: x\r\nConnection: close\r\n\r\n");
    auto facts = read_request_facts(req);
    CHECK(facts.host == "a");
    CHECK(facts.host_count == 2);
    CHECK(facts.connection_close);
    CHECK_FALSE(facts.keep_alive(11));
}
