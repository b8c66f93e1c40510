#include <doctest/doctest.h>

#include "config/units.hpp"

using namespace rategate::config;
using std::chrono::microseconds;

TEST_CASE("durations parse in every unit") {
    std::string err;
    CHECK(parse_duration("250ms", err) == microseconds(250'000));
    CHECK(parse_duration("1s", err) == microseconds(1'000'000));
    CHECK(parse_duration("2m", err) == microseconds(120'000'000));
    CHECK(parse_duration("1h", err) == microseconds(3'600'000'000));
    CHECK(parse_duration("1.5s", err) == microseconds(1'500'000));
    CHECK(parse_duration("750us", err) == microseconds(750));
    CHECK(parse_duration("0ms", err) == microseconds(0));
}

TEST_CASE("bad durations are refused with a reason") {
    std::string err;
    CHECK_FALSE(parse_duration("10", err));
    CHECK(err.find("unit") != std::string::npos);
    CHECK_FALSE(parse_duration("ms", err));
    CHECK_FALSE(parse_duration("5 s", err));
    CHECK_FALSE(parse_duration("-5s", err));
    CHECK_FALSE(parse_duration("1.0005ms", err));
    CHECK(err.find("finer") != std::string::npos);
    CHECK_FALSE(parse_duration("3d", err));
}

TEST_CASE("sizes parse with binary and decimal units") {
    std::string err;
    CHECK(parse_size("10MiB", err) == 10ull * 1024 * 1024);
    CHECK(parse_size("512KiB", err) == 512ull * 1024);
    CHECK(parse_size("1GiB", err) == 1024ull * 1024 * 1024);
    CHECK(parse_size("10MB", err) == 10'000'000ull);
    CHECK(parse_size("100", err) == 100ull);
    CHECK(parse_size("100B", err) == 100ull);
    CHECK_FALSE(parse_size("10XB", err));
    CHECK_FALSE(parse_size("0.5B", err));
}

TEST_CASE("durations format back to their shortest form") {
    CHECK(format_duration(microseconds(250'000)) == "250ms");
    CHECK(format_duration(microseconds(120'000'000)) == "2m");
    CHECK(format_duration(microseconds(1500)) == "1500us");
}
