#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

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
    // Smuggling: Beast's parser takes the body as chunked only when the first "chunked" token
    // is the last and the list is clean tokens; each of these passed a last-coding check alone.
    CHECK(check_header_block("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n") ==
          "Transfer-Encoding applies chunked twice");
    CHECK(check_header_block("POST / HTTP/1.1\r\nTransfer-Encoding: x y, chunked\r\n\r\n") ==
          "invalid Transfer-Encoding");
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

namespace {

// The line-by-line scans the one-pass code replaced, kept as the model it must agree with
// (reason for reason) on random blocks.
header_end model_header_end(std::string_view data, std::size_t from) {
    header_end out;
    std::size_t i = std::min(from, data.size());
    while (i < data.size()) {
        auto lf = data.find('\n', i);
        std::size_t end = lf == std::string_view::npos ? data.size() : lf;
        if (data.substr(i, end - i).find('\0') != std::string_view::npos) {
            out.status = header_end::state::malformed;
            out.reason = "NUL in header";
            return out;
        }
        if (lf == std::string_view::npos) break;
        if (end == 0 || data[end - 1] != '\r') {
            out.status = header_end::state::malformed;
            out.reason = "bare LF in header";
            return out;
        }
        if (end >= 3 && data[end - 2] == '\n' && data[end - 3] == '\r') {
            out.status = header_end::state::complete;
            out.length = end + 1;
            return out;
        }
        i = end + 1;
    }
    out.resume = data.size() > 3 ? data.size() - 3 : 0;
    return out;
}

bool model_iequals(std::string_view a, std::string_view b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
        return std::tolower(static_cast<unsigned char>(x)) ==
               std::tolower(static_cast<unsigned char>(y));
    });
}

std::string_view model_trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
        s.remove_suffix(1);
    return s;
}

std::string model_check(std::string_view block) {
    if (block.size() < 4 || block.substr(block.size() - 4) != "\r\n\r\n")
        return "incomplete header block";
    bool cl = false, te = false, first = true;
    std::size_t pos = 0;
    while (pos < block.size()) {
        auto eol = block.find("\r\n", pos);
        auto line = block.substr(pos, eol - pos);
        pos = eol + 2;
        if (line.empty() && first) return "empty request line";
        if (line.empty()) break;
        auto bad = line.find_first_of(std::string_view("\r\0\n", 3));
        if (bad != std::string_view::npos) {
            if (line[bad] == '\r') return "bare CR in header";
            if (line[bad] == '\0') return "NUL in header";
            return "bare LF in header";
        }
        if (first) {
            first = false;
            continue;
        }
        if (line.front() == ' ' || line.front() == '\t') return "obsolete line folding in header";
        auto colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0)
            return "header line without a field name";
        auto name = line.substr(0, colon);
        if (name.find_first_of(" \t") != std::string_view::npos)
            return "whitespace before colon in header";
        auto value = model_trim(line.substr(colon + 1));
        if (model_iequals(name, "content-length")) {
            if (cl) return "repeated Content-Length";
            cl = true;
            if (value.empty() || value.size() > 19 ||
                value.find_first_not_of("0123456789") != std::string_view::npos)
                return "invalid Content-Length";
        } else if (model_iequals(name, "transfer-encoding")) {
            if (te) return "repeated Transfer-Encoding";
            te = true;
            // The value's own rules are check_transfer_encoding's (tested below); the model
            // checks the line scan around it.
            if (auto why = check_transfer_encoding(value); !why.empty()) return why;
        }
    }
    if (cl && te) return "both Content-Length and Transfer-Encoding";
    return {};
}

}  // namespace

TEST_CASE("the one-pass scans agree with the line-by-line model on random blocks") {
    // Pieces that make every reason likely: line ends whole and broken, framing headers,
    // whitespace, NUL, and runs long enough to cross the eight-byte words.
    const std::vector<std::string> pieces = {"GET / HTTP/1.1",
                                             "\r\n",
                                             "\r\n",
                                             "\r\n",
                                             "\r",
                                             "\n",
                                             std::string(1, '\0'),
                                             " ",
                                             "\t",
                                             ":",
                                             ": ",
                                             "Host",
                                             "content-length",
                                             "Content-Length: ",
                                             "Transfer-Encoding: ",
                                             "chunked",
                                             "gzip, ",
                                             ",",
                                             "5",
                                             "12345678901234567890",
                                             "x",
                                             "X-Long-Header-Name-Here",
                                             "a-value-with-many-bytes-in-it",
                                             "\x7f",
                                             "\xc3\xa9"};
    std::uint64_t seed = 12345;
    auto next = [&seed] {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<std::size_t>(seed >> 33);
    };
    int complete = 0, accepted = 0;
    for (int round = 0; round < 100000; ++round) {
        std::string s;
        std::size_t n = next() % 24;
        for (std::size_t k = 0; k < n; ++k)
            s += pieces[next() % pieces.size()];
        if (next() % 2) s += "\r\n\r\n";
        std::size_t from = s.empty() ? 0 : next() % (s.size() + 1);
        auto a = find_header_end(s, from), b = model_header_end(s, from);
        REQUIRE(a.status == b.status);
        REQUIRE(a.resume == b.resume);
        if (a.status == header_end::state::complete) REQUIRE(a.length == b.length);
        if (a.status == header_end::state::malformed)
            REQUIRE(std::string_view(a.reason) == b.reason);
        complete += a.status == header_end::state::complete;
        auto got = check_header_block(s);
        REQUIRE(got == model_check(s));
        accepted += got.empty();
    }
    // The draw reaches both outcomes, not only refusals.
    CHECK(complete > 1000);
    CHECK(accepted > 100);
}

TEST_CASE("check_transfer_encoding: clean tokens, chunked exactly once and last") {
    struct row {
        const char* value;
        const char* reason;  // "" = accepted
    };
    const row rows[] = {
        {"chunked", ""},
        {"Chunked", ""},
        {"gzip, chunked", ""},
        {"gzip,chunked", ""},
        {"gzip ,\tchunked", ""},
        {"x-custom, gzip, CHUNKED", ""},
        {"", "invalid Transfer-Encoding"},
        {"gzip", "Transfer-Encoding must end with chunked"},
        {"chunked, gzip", "Transfer-Encoding must end with chunked"},
        {"chunked, chunked", "Transfer-Encoding applies chunked twice"},
        {"chunked, gzip, chunked", "Transfer-Encoding applies chunked twice"},
        {"x y, chunked", "invalid Transfer-Encoding"},
        {"gzip;q=1, chunked", "invalid Transfer-Encoding"},
        {"gzip ;a=b, chunked", "invalid Transfer-Encoding"},
        {"\"x\", chunked", "invalid Transfer-Encoding"},
        {"gzip,, chunked", "invalid Transfer-Encoding"},
        {", chunked", "invalid Transfer-Encoding"},
        {"chunked,", "invalid Transfer-Encoding"},
        {"chunked;x=1", "invalid Transfer-Encoding"},
        {"chun ked", "invalid Transfer-Encoding"},
    };
    for (const auto& r : rows) {
        INFO(r.value);
        CHECK(check_transfer_encoding(r.value) == r.reason);
    }
}
