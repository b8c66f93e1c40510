#include <doctest/doctest.h>

#include "gateway/http/request_normaliser.hpp"
#include "gateway/http/response_framing.hpp"

using namespace rategate::gateway::h1;

namespace {

// RFC 3986 §5.2.2–5.2.4 reference resolution against a base, used to run the §5.4 examples
// through our remove_dot_segments (the merge step is the RFC's §5.2.3, written for the test).
std::string resolve(std::string_view base_path, std::string_view ref) {
    if (!ref.empty() && ref.front() == '/') return remove_dot_segments(ref);
    auto slash = base_path.rfind('/');
    std::string merged(base_path.substr(0, slash + 1));
    merged += ref;
    return remove_dot_segments(merged);
}

normalise_result run(std::string_view method, std::string_view target, unsigned version = 11,
                     std::size_t host_count = 1, std::string_view host = "a.example") {
    return normalise_request({method, target, version, host_count, host});
}

}  // namespace

TEST_CASE("RFC 3986 §5.4.1 and §5.4.2 reference resolution examples (path part)") {
    // Base "http://a/b/c/d;p?q": the examples' expected paths.
    struct row {
        const char* ref;
        const char* path;
    } rows[] = {
        {"g", "/b/c/g"},          {"./g", "/b/c/g"},
        {"g/", "/b/c/g/"},        {"/g", "/g"},
        {"g;x", "/b/c/g;x"},      {".", "/b/c/"},
        {"./", "/b/c/"},          {"..", "/b/"},
        {"../", "/b/"},           {"../g", "/b/g"},
        {"../..", "/"},           {"../../", "/"},
        {"../../g", "/g"},        {"../../../g", "/g"},
        {"../../../../g", "/g"},  {"/./g", "/g"},
        {"/../g", "/g"},          {"g.", "/b/c/g."},
        {".g", "/b/c/.g"},        {"g..", "/b/c/g.."},
        {"..g", "/b/c/..g"},      {"./../g", "/b/g"},
        {"./g/.", "/b/c/g/"},     {"g/./h", "/b/c/g/h"},
        {"g/../h", "/b/c/h"},     {"g;x=1/./y", "/b/c/g;x=1/y"},
        {"g;x=1/../y", "/b/c/y"},
    };
    for (const auto& r : rows) {
        CAPTURE(r.ref);
        CHECK(resolve("/b/c/d;p", r.ref) == r.path);
    }
    // §5.2.4's own walk-throughs.
    CHECK(remove_dot_segments("/a/b/c/./../../g") == "/a/g");
    CHECK(remove_dot_segments("mid/content=5/../6") == "mid/6");
}

TEST_CASE("path normalisation of SPEC §3") {
    struct row {
        const char* in;
        const char* out;
    } rows[] = {
        {"/", "/"},
        {"/api/orders/1", "/api/orders/1"},
        {"/public/../api/orders/1", "/api/orders/1"},
        {"//api/orders", "/api/orders"},
        {"/api//orders///1", "/api/orders/1"},
        {"/%61pi/orders", "/api/orders"},
        {"/%41%5a%7e%2d%2e%5f", "/AZ~-._"},
        {"/public/%2e%2e/api/orders", "/api/orders"},
        {"/public/%2E%2E/api/orders", "/api/orders"},
        {"/public/.%2e/api", "/api"},
        {"/a/%2f/b", "/a/%2F/b"},  // %2F stays encoded and is not a separator
        {"/a/%2F..%2Fb", "/a/%2F..%2Fb"},
        {"/a%5c..%5cb", "/a%5C..%5Cb"},  // %5C too
        {"/a%3ab", "/a%3Ab"},
        {"/..", "/"},
        {"/../a", "/a"},
        {"/a/./b/.", "/a/b/"},
        {"/a/b/..", "/a/"},
        {"/./", "/"},
        {"/a/.//../b", "/b"},
        {"/%c3%a9", "/%C3%A9"},
    };
    for (const auto& r : rows) {
        CAPTURE(r.in);
        auto n = normalise_path(r.in);
        REQUIRE(n);
        CHECK(*n == r.out);
        CHECK(*normalise_path(*n) == *n);  // idempotent
    }
    CHECK_FALSE(normalise_path("/a%"));
    CHECK_FALSE(normalise_path("/a%2"));
    CHECK_FALSE(normalise_path("/a%zz"));
}

TEST_CASE("paths: encoded control characters and a raw backslash are refused (SPEC 3)") {
    struct {
        const char* in;
        const char* why;
    } rows[] = {
        {"/a%00b", "encoded control character in path"},
        {"/a%00", "encoded control character in path"},
        {"/%01", "encoded control character in path"},
        {"/a%0d%0aX-Injected:%201", "encoded control character in path"},
        {"/a%0A", "encoded control character in path"},
        {"/a%1f", "encoded control character in path"},
        {"/a%1F", "encoded control character in path"},
        {"/a%7f", "encoded control character in path"},
        {"/a\\..\\b", "backslash in path"},
        {"/admin\\", "backslash in path"},
        {"/a\tb", "control character in path"},
        {"/a%zz", "malformed percent-encoding in path"},
    };
    for (const auto& r : rows) {
        CAPTURE(r.in);
        std::string_view why;
        CHECK_FALSE(normalise_path(r.in, &why));
        CHECK(why == r.why);
    }
    // Their neighbours are data: space, DEL's neighbours, an encoded backslash, UTF-8.
    for (const char* ok : {"/a%20b", "/a%7e", "/a%5Cb", "/a%80", "/a%ff", "/%21"}) {
        CAPTURE(ok);
        CHECK(normalise_path(ok));
    }
    auto r = run("GET", "/api/orders%00.json");
    REQUIRE(r.error);
    CHECK(r.error->status == 400);
    CHECK(r.error->message == "encoded control character in path");
    r = run("GET", "http://a.example/api%5c..%5corders/%7F");
    REQUIRE(r.error);
    CHECK(r.error->status == 400);
}

TEST_CASE("targets: origin-form, absolute-form, and what is a 400") {
    auto r = run("GET", "/public/../api/orders/1?x=%2e%2e&y");
    REQUIRE(r.request);
    CHECK(r.request->path == "/api/orders/1");
    CHECK(r.request->has_query);
    CHECK(r.request->query == "x=%2e%2e&y");  // the query is forwarded unchanged
    CHECK(r.request->origin_form("/orders/1") == "/orders/1?x=%2e%2e&y");
    CHECK(r.request->is_origin_form_of("/api/orders/1?x=%2e%2e&y"));
    CHECK_FALSE(r.request->is_origin_form_of("/public/../api/orders/1?x=%2e%2e&y"));
    CHECK_FALSE(r.request->is_origin_form_of("/api/orders/1?x=%2e%2e"));
    CHECK_FALSE(r.request->is_origin_form_of("/api/orders/1"));
    CHECK(r.request->host == "a.example");
    CHECK_FALSE(r.request->absolute_form);

    r = run("GET", "/a?");
    REQUIRE(r.request);
    CHECK(r.request->has_query);
    CHECK(r.request->origin_form("/a") == "/a?");
    CHECK(r.request->is_origin_form_of("/a?"));
    CHECK_FALSE(r.request->is_origin_form_of("/a"));
    r = run("GET", "/a");
    REQUIRE(r.request);
    CHECK(r.request->is_origin_form_of("/a"));
    CHECK_FALSE(r.request->is_origin_form_of("/a?"));

    // Absolute-form: routed by its authority, which replaces Host.
    r = run("GET", "http://B.Example:8080/x/../y?q", 11, 1, "a.example");
    REQUIRE(r.request);
    CHECK(r.request->absolute_form);
    CHECK(r.request->host == "b.example:8080");
    CHECK(r.request->host_name() == "b.example");
    CHECK(r.request->port == 8080);
    CHECK(r.request->path == "/y");
    CHECK(r.request->origin_form(r.request->path) == "/y?q");
    r = run("GET", "HTTPS://b.example");
    REQUIRE(r.request);
    CHECK(r.request->path == "/");

    for (const char* bad : {"/a#frag", "/a%zz", "/a%", "*", "a/b", "ftp://a.example/x", "http:///x",
                            "http://us@a.example/x", "/a b", "/a\\b", "http://a.example:99999/"}) {
        CAPTURE(bad);
        r = run("GET", bad);
        REQUIRE(r.error);
        CHECK(r.error->status == 400);
        CHECK(r.error->code == "bad_request");
    }
}

TEST_CASE("Host: exactly one valid Host in HTTP/1.1 (RFC 9112 §3.2)") {
    CHECK(run("GET", "/", 11, 0, "").error->status == 400);
    CHECK(run("GET", "/", 11, 2, "a.example").error->status == 400);
    CHECK(run("GET", "/", 10, 2, "a.example").error->status == 400);
    for (const char* bad :
         {"a b", "us@a.example", "", "a.example:x", "a.example:65536", "[::1", "a/b"}) {
        CAPTURE(bad);
        auto r = run("GET", "/", 11, 1, bad);
        REQUIRE(r.error);
        CHECK(r.error->status == 400);
    }
    auto r = run("GET", "/", 10, 0, "");  // HTTP/1.0 may omit Host
    REQUIRE(r.request);
    CHECK(r.request->host.empty());
    r = run("GET", "/", 11, 1, "API.Example.COM:8443");
    REQUIRE(r.request);
    CHECK(r.request->host == "api.example.com:8443");
    CHECK(r.request->host_name() == "api.example.com");
    CHECK(r.request->port == 8443);
    r = run("GET", "/", 11, 1, "[::1]:80");
    REQUIRE(r.request);
    CHECK(r.request->host_name() == "[::1]");
}

TEST_CASE("CONNECT is never forwarded: 405") {
    auto r = run("CONNECT", "a.example:443");
    REQUIRE(r.error);
    CHECK(r.error->status == 405);
    r = run("CONNECT", "/path");
    REQUIRE(r.error);
    CHECK(r.error->status == 405);
}

TEST_CASE("response framing per HTTP version (RFC 9112 §6)") {
    // HTTP/1.0 never gets chunked: unknown length is close-delimited and ends keep-alive.
    auto f = frame_response({10, true, false, 200, false, true});
    CHECK(f.body == body_framing::close_delimited);
    CHECK_FALSE(f.keep_alive);
    f = frame_response({10, true, false, 200, false, false});
    CHECK(f.body == body_framing::close_delimited);
    f = frame_response({10, true, false, 200, true, false});
    CHECK(f.body == body_framing::sized);
    CHECK(f.keep_alive);
    f = frame_response({10, false, false, 200, true, false});
    CHECK_FALSE(f.keep_alive);
    // HTTP/1.1: unknown length is chunked, keep-alive kept.
    f = frame_response({11, true, false, 200, false, false});
    CHECK(f.body == body_framing::chunked);
    CHECK(f.keep_alive);
    f = frame_response({11, true, false, 200, false, true});
    CHECK(f.body == body_framing::chunked);
    // No body for HEAD, 204, 304, 1xx, whatever the headers say.
    for (unsigned status : {200u, 404u}) {
        f = frame_response({11, true, true, status, false, true});
        CHECK(f.body == body_framing::none);
        CHECK(f.keep_alive);
        f = frame_response({10, true, true, status, false, true});
        CHECK(f.body == body_framing::none);
        CHECK(f.keep_alive);
    }
    CHECK(frame_response({11, true, false, 204, false, true}).body == body_framing::none);
    CHECK(frame_response({11, true, false, 304, true, false}).body == body_framing::none);
}

TEST_CASE("an upstream connection is reused only when the head gave the response's end") {
    using rategate::gateway::h1::upstream_reusable;
    struct row {
        const char* what;
        rategate::gateway::h1::upstream_response_facts r;
        bool reusable;
    };
    const row rows[] = {
        {"sized", {.has_content_length = true, .content_length = 5}, true},
        {"empty sized", {.has_content_length = true}, true},
        {"chunked", {.transfer_encoding = true, .chunked = true}, true},
        {"Connection: close", {.keep_alive = false, .has_content_length = true}, false},
        {"close-delimited", {}, false},
        {"close-delimited under a coding", {.transfer_encoding = true}, false},
        {"bodiless, nothing announced", {.bodiless = true}, true},
        {"bodiless, Content-Length 0", {.bodiless = true, .has_content_length = true}, true},
        {"bodiless, a length announced",
         {.bodiless = true, .has_content_length = true, .content_length = 8},
         false},
        {"bodiless, chunked announced",
         {.bodiless = true, .transfer_encoding = true, .chunked = true},
         false},
    };
    for (const auto& r : rows) {
        CAPTURE(r.what);
        CHECK(upstream_reusable(r.r) == r.reusable);
    }
}

TEST_CASE("a connection's Host memo gives what a fresh parse gives, and never hides an error") {
    authority_memo memo;
    auto run = [&](std::string_view host, authority_memo* m) {
        return normalise_request({"GET", "/a", 11, 1, host}, m);
    };
    for (auto host : {"API.Example.com:8080", "API.Example.com:8080", "[::1]:81", "[::1]:81",
                      "api.example.com", "a.b"}) {
        CAPTURE(host);
        auto fresh = run(host, nullptr), remembered = run(host, &memo);
        REQUIRE(fresh.request);
        REQUIRE(remembered.request);
        CHECK(remembered.request->host == fresh.request->host);
        CHECK(remembered.request->host_name() == fresh.request->host_name());
        CHECK(remembered.request->port == fresh.request->port);
        CHECK(memo.text == host);
    }
    // A bad Host after a good one is still refused, and the good one stays remembered.
    auto bad = run("user@a.b", &memo);
    CHECK(bad.error);
    CHECK(memo.text == "a.b");
    CHECK(run("a.b", &memo).request->host == "a.b");
}
