#include <doctest/doctest.h>

#include "gateway/http/header_scan.hpp"

using namespace rategate::gateway;

TEST_CASE("header end is found across split reads") {
    std::string a = "GET / HTTP/1.1\r\nHost: x\r\n\r";
    auto r = find_header_end(a, 0);
    CHECK(r.status == header_end::state::incomplete);
    std::string b = a + "\nGET";
    auto r2 = find_header_end(b, r.resume);
    CHECK(r2.status == header_end::state::complete);
    CHECK(r2.length == a.size() + 1);
}

TEST_CASE("bare LF and NUL are caught while scanning") {
    CHECK(find_header_end("GET / HTTP/1.1\nHost: x\n\n", 0).status == header_end::state::malformed);
    CHECK(find_header_end(std::string("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", 27), 0).status ==
          header_end::state::malformed);
}

TEST_CASE("valid blocks pass") {
    CHECK(check_header_block("GET / HTTP/1.1\r\nHost: x\r\n\r\n").empty());
    CHECK(check_header_block("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n").empty());
    CHECK(
        check_header_block("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n").empty());
}

TEST_CASE("smuggling and malformed headers are refused with a reason") {
    CHECK(check_header_block(
              "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n") ==
          "both Content-Length and Transfer-Encoding");
    CHECK(check_header_block("POST / HTTP/1.1\r\nContent-Length: 5x\r\n\r\n") ==
          "invalid Content-Length");
    CHECK(check_header_block("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n") ==
          "invalid Content-Length");
    CHECK(check_header_block("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n") ==
          "repeated Content-Length");
    CHECK(check_header_block("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n") ==
          "Transfer-Encoding must end with chunked");
    CHECK(check_header_block("GET / HTTP/1.1\r\nHost : x\r\n\r\n") ==
          "whitespace before colon in header");
    CHECK(check_header_block("GET / HTTP/1.1\r\nX-A: 1\r\n  folded\r\n\r\n") ==
          "obsolete line folding in header");
    CHECK(check_header_block("GET / HTTP/1.1\r\nX-A: 1\rX\r\n\r\n") == "bare CR in header");
    CHECK(check_header_block("GET / HTTP/1.1\r\n: novalue\r\n\r\n") ==
          "header line without a field name");
}

TEST_CASE("a block opening with an empty line is refused, not waved through unchecked") {
    // Found by tests/fuzz/fuzz_header_scan: the empty first line ended the scan at once.
    CHECK(check_header_block("\r\nT / HTTP/1.1\r\nHost : x\r\n\r\n") == "empty request line");
    CHECK(check_header_block(
              "\r\nPOST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n") ==
          "empty request line");
}
