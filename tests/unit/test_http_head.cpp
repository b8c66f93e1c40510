#include <doctest/doctest.h>

#include "gateway/http/http_head.hpp"

namespace http = boost::beast::http;
using namespace rategate::gateway;

TEST_CASE("request head: start line, fields in order, empty line") {
    http::request_header<> h;
    h.method(http::verb::post);
    h.target("/orders?x=1");
    h.version(11);
    h.set(http::field::host, "api");
    h.set(http::field::content_length, "5");
    h.insert("X-Multi", "a");
    h.insert("X-Multi", "b");
    std::string out;
    append_request_head(out, h);
    CHECK(out ==
          "POST /orders?x=1 HTTP/1.1\r\nHost: api\r\nContent-Length: 5\r\nX-Multi: a\r\nX-Multi: "
          "b\r\n\r\n");
}

TEST_CASE("response head keeps the parsed reason and the version") {
    http::response_header<> h;
    h.result(418);
    h.reason("I'm a teapot");
    h.version(10);
    h.set(http::field::content_length, "0");
    std::string out;
    append_response_head(out, h);
    CHECK(out == "HTTP/1.0 418 I'm a teapot\r\nContent-Length: 0\r\n\r\n");
    http::response_header<> d;
    d.result(http::status::not_found);
    std::string out2;
    append_response_head(out2, d);
    CHECK(out2 == "HTTP/1.1 404 Not Found\r\n\r\n");
}
