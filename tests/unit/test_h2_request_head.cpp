#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "gateway/http2/request_head.hpp"

using rategate::gateway::http2::request_head_builder;
using fields = std::vector<std::pair<std::string, std::string>>;

namespace {

const fields base = {{":method", "GET"},
                     {":scheme", "https"},
                     {":authority", "api.test"},
                     {":path", "/api/orders?x=1"}};

// Feeds `f` and finishes: the head status, or malformed when a field was refused.
request_head_builder::head_status build(const fields& f, request_head_builder& b) {
    for (const auto& [n, v] : f)
        if (b.add(n, v) != request_head_builder::field_status::ok)
            return request_head_builder::head_status::malformed;
    return b.finish();
}

fields with(fields f, std::pair<std::string, std::string> extra) {
    f.push_back(std::move(extra));
    return f;
}

}  // namespace

TEST_CASE("h2 request head: a request becomes its HTTP/1.1 head") {
    request_head_builder b(16384);
    auto f = base;
    f.push_back({"cookie", "a=1"});
    f.push_back({"x-user-id", "alice"});
    f.push_back({"cookie", "b=2"});
    f.push_back({"content-length", "12"});
    REQUIRE(build(f, b) == request_head_builder::head_status::ok);
    auto& h = b.head();
    CHECK(h.method_string() == "GET");
    CHECK(h.target() == "/api/orders?x=1");
    CHECK(h["host"] == "api.test");
    CHECK(h["cookie"] == "a=1; b=2");
    CHECK(h["x-user-id"] == "alice");
    CHECK(b.content_length() == 12u);
}

TEST_CASE("h2 request head: malformed requests are PROTOCOL_ERROR") {
    using s = request_head_builder::head_status;
    struct row {
        const char* what;
        fields f;
    };
    const row rows[] = {
        {"missing :method", {{":scheme", "http"}, {":authority", "a"}, {":path", "/"}}},
        {"missing :path", {{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}}},
        {"missing :scheme", {{":method", "GET"}, {":authority", "a"}, {":path", "/"}}},
        {"repeated", with(base, {":path", "/x"})},
        {"unknown pseudo", with(base, {":protocol", "websocket"})},
        {"pseudo after regular", {{":method", "GET"}, {"accept", "*/*"}, {":path", "/"}}},
        {"upper case", with(base, {"X-User-Id", "alice"})},
        {"connection", with(base, {"connection", "keep-alive"})},
        {"transfer-encoding", with(base, {"transfer-encoding", "chunked"})},
        {"keep-alive", with(base, {"keep-alive", "5"})},
        {"upgrade", with(base, {"upgrade", "h2c"})},
        {"te gzip", with(base, {"te", "gzip"})},
        {"host differs", with(base, {"host", "other.test"})},
        {"bad content-length", with(base, {"content-length", "1x"})},
        {"value with LF", with(base, {"x-a", "a\nb"})},
        {"value with NUL", with(base, {"x-a", std::string("a\0b", 3)})},
        {"value with 0x01", with(base, {"x-a", "a\x01b"})},
        {"value with DEL", with(base, {"x-a", "a\x7f"})},
        {"value with ESC", with(base, {"x-user-id", "\x1b[2Jalice"})},
        {"value with leading space", with(base, {"x-a", " a"})},
        {"relative path",
         {{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}, {":path", "x"}}},
    };
    for (const auto& r : rows) {
        CAPTURE(r.what);
        request_head_builder b(16384);
        CHECK(build(r.f, b) == s::malformed);
    }
    request_head_builder ok(16384);
    CHECK(build(with(base, {"te", "trailers"}), ok) == s::ok);
    request_head_builder same(16384);
    CHECK(build(with(base, {"host", "api.test"}), same) == s::ok);
    request_head_builder tab(16384);  // HTAB and obs-text are field content
    CHECK(build(with(base, {"x-a", "a\tb \xe9"}), tab) == s::ok);
}

TEST_CASE("h2 request head: no authority is a 400, a big block a 431, a huge one a flood") {
    request_head_builder none(16384);
    CHECK(build({{":method", "GET"}, {":scheme", "http"}, {":path", "/"}}, none) ==
          request_head_builder::head_status::no_authority);
    request_head_builder host_only(16384);
    CHECK(build({{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {"host", "h.test"}},
                host_only) == request_head_builder::head_status::ok);
    CHECK(host_only.head()["host"] == "h.test");

    request_head_builder big(1000);
    auto f = base;
    f.push_back({"x-big", std::string(1000, 'a')});  // 1000 + 5 + 32 bytes: over, under 4x
    CHECK(build(f, big) == request_head_builder::head_status::too_large);

    request_head_builder huge(1000);
    for (const auto& [n, v] : base)
        CHECK(huge.add(n, v) == request_head_builder::field_status::ok);
    auto r = request_head_builder::field_status::ok;
    for (int i = 0; i < 100 && r == request_head_builder::field_status::ok; ++i)
        r = huge.add("x-filler", std::string(100, 'b'));
    CHECK(r == request_head_builder::field_status::flood);
    CHECK(huge.size() > 4000);
    CHECK(huge.size() <= 4000 + 140);
}

TEST_CASE("h2 request head: trailer fields") {
    using rategate::gateway::http2::check_trailer_field;
    CHECK(check_trailer_field("grpc-status", "0") == nullptr);
    CHECK(check_trailer_field(":status", "200") != nullptr);
    CHECK(check_trailer_field("Grpc-Status", "0") != nullptr);
    CHECK(check_trailer_field("connection", "close") != nullptr);
    CHECK(check_trailer_field("grpc-message", "a\x01b") != nullptr);
}
