#include <doctest/doctest.h>

#include <string>

#include "replay/trace.hpp"

using namespace rategate::replay;

namespace {

// The reason parse_trace_line gives for `line`, or "" when it parses.
std::string reason(const std::string& line, std::size_t line_no = 1) {
    try {
        parse_trace_line(line, line_no);
        return "";
    } catch (const trace_error& e) {
        CHECK(e.line_no() == line_no);
        CHECK(std::string(e.what()) == std::to_string(line_no) + ": " + e.reason());
        return e.reason();
    }
}

}  // namespace

TEST_CASE("a line by route name") {
    auto l = parse_trace_line(
        R"({"t_ms": 1700000000123.5, "route": "orders", "user": "u1", "ip": "10.0.0.1", "cost": 2})",
        1);
    CHECK(l.t_ms == 1700000000123.5);
    CHECK(l.route == "orders");
    CHECK(l.user == "u1");
    CHECK(l.ip == "10.0.0.1");
    CHECK(l.cost == 2.0);
    CHECK(l.path.empty());
}

TEST_CASE("a line routed by method, path and host; defaults") {
    auto l = parse_trace_line(R"({"t_ms": 5, "path": "/api/x"})", 3);
    CHECK_FALSE(l.route);
    CHECK(l.method == "GET");
    CHECK(l.path == "/api/x");
    CHECK(l.host.empty());
    CHECK_FALSE(l.user);
    CHECK(l.ip.empty());
    CHECK_FALSE(l.cost);
    auto m = parse_trace_line(R"({"t_ms":5,"method":"POST","path":"/a","host":"h.example"})", 1);
    CHECK(m.method == "POST");
    CHECK(m.host == "h.example");
}

TEST_CASE("a null user means no user id; headers keep string values only") {
    auto l = parse_trace_line(
        R"({"t_ms":1,"route":"r","user":null,"headers":{"X-Key":"k1","X-N":3,"x-b":"b"}})", 1);
    CHECK_FALSE(l.user);
    REQUIRE(l.headers.size() == 2);
    CHECK(l.header("x-key") == "k1");
    CHECK(l.header("X-B") == "b");
    CHECK_FALSE(l.header("X-N"));
    CHECK_FALSE(l.header("X-Missing"));
}

TEST_CASE("a route given by name ignores the match fields") {
    CHECK(reason(R"({"t_ms":1,"route":"r","path":7,"method":[]})").empty());
}

TEST_CASE("the edges of t_ms and cost are accepted") {
    CHECK(reason(R"({"t_ms":0,"route":"r"})").empty());
    CHECK(reason(R"({"t_ms":9007199254740.991,"route":"r","cost":1000000000})").empty());
    CHECK(reason(R"({"t_ms":1700000000123.5,"route":"r","cost":0.5})").empty());
}

TEST_CASE("malformed lines are errors that name the line") {
    struct row {
        const char* line;
        const char* reason;
    };
    const row rows[] = {
        {"{not json", "not a JSON object"},
        {"[1, 2]", "not a JSON object"},
        {"\"t_ms\"", "not a JSON object"},
        {R"({"t_ms": 1} trailing)", "not a JSON object"},
        {R"({"route": "r"})", "\"t_ms\" (number) is required"},
        {R"({"t_ms": "1", "route": "r"})", "\"t_ms\" (number) is required"},
        {R"({"t_ms": 1, "route": 5})", "\"route\" must be a string"},
        {R"({"t_ms": 1})", "needs \"route\", or \"path\" (with optional \"method\", \"host\")"},
        {R"({"t_ms": 1, "path": ""})",
         "needs \"route\", or \"path\" (with optional \"method\", \"host\")"},
        {R"({"t_ms": 1, "path": 1})", "\"path\" must be a string"},
        {R"({"t_ms": 1, "path": "/", "method": 1})", "\"method\" must be a string"},
        {R"({"t_ms": 1, "path": "/", "host": null})", "\"host\" must be a string"},
        {R"({"t_ms": 1, "route": "r", "user": 1})", "\"user\" must be a string"},
        {R"({"t_ms": 1, "route": "r", "ip": false})", "\"ip\" must be a string"},
        {R"({"t_ms": 1, "route": "r", "headers": []})", "\"headers\" must be an object"},
        {R"({"t_ms": 1, "route": "r", "cost": 0})", "\"cost\" must be a positive number"},
        {R"({"t_ms": 1, "route": "r", "cost": -2})", "\"cost\" must be a positive number"},
        {R"({"t_ms": 1, "route": "r", "cost": "1"})", "\"cost\" must be a positive number"},
        // Beyond a route's cost the waits overflow: 1e308 printed "retry_after_ms":inf.
        {R"({"t_ms": 1, "route": "r", "cost": 1e308})", "\"cost\" must be at most 1000000000"},
        {R"({"t_ms": 1, "route": "r", "cost": 1000000001})", "\"cost\" must be at most 1000000000"},
        // Infinite in µs (1e308 ms crashed the replay), inexact past 2^53 µs, before the epoch.
        {R"({"t_ms": 1e308, "route": "r"})",
         "\"t_ms\" must be between 0 and 9007199254740 (milliseconds since the Unix epoch)"},
        {R"({"t_ms": 9007199254741, "route": "r"})",
         "\"t_ms\" must be between 0 and 9007199254740 (milliseconds since the Unix epoch)"},
        {R"({"t_ms": -1, "route": "r"})",
         "\"t_ms\" must be between 0 and 9007199254740 (milliseconds since the Unix epoch)"},
    };
    for (const auto& r : rows) {
        CAPTURE(r.line);
        CHECK(reason(r.line, 42) == r.reason);
    }
}

TEST_CASE("the reader skips blank lines, counts every line and refuses time going backwards") {
    trace_reader reader;
    CHECK(reader.next(R"({"t_ms": 10, "route": "r"})"));
    CHECK_FALSE(reader.next(" \t\r"));
    CHECK_FALSE(reader.next(""));
    CHECK(reader.next("{\"t_ms\": 10, \"route\": \"r\"}\r"));  // equal times are fine; CRLF too
    CHECK(reader.line_no() == 4);
    try {
        reader.next(R"({"t_ms": 9.5, "route": "r"})");
        FAIL("expected a trace_error");
    } catch (const trace_error& e) {
        CHECK(e.line_no() == 5);
        CHECK(e.reason() == "\"t_ms\" goes backwards");
    }
}

TEST_CASE("is_blank") {
    CHECK(is_blank(""));
    CHECK(is_blank(" \t \r"));
    CHECK_FALSE(is_blank(" {}"));
}
