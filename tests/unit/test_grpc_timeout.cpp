#include <doctest/doctest.h>

#include "gateway/http/grpc_timeout.hpp"

using namespace rategate::gateway::grpc;
using std::chrono::microseconds;

TEST_CASE("grpc-timeout: values and units") {
    struct {
        const char* in;
        long long us;
    } rows[] = {
        {"1H", 3'600'000'000LL},
        {"2M", 120'000'000LL},
        {"3S", 3'000'000LL},
        {"250m", 250'000},
        {"7u", 7},
        {"1000n", 1},
        {"1n", 1},
        {"0n", 0},
        {"0S", 0},
        {"99999999m", 99'999'999'000LL},
        {"00000001S", 1'000'000},
    };
    for (const auto& r : rows) {
        CAPTURE(r.in);
        auto t = parse_timeout(r.in);
        REQUIRE(t);
        CHECK(t->count() == r.us);
    }
    for (const char* bad : {"", "S", "1", "1s", "1h", "-1S", "+1S", " 1S", "1S ", "123456789S",
                            "1.5S", "1x", "1SS", "0x1S"}) {
        CAPTURE(bad);
        CHECK_FALSE(parse_timeout(bad));
    }
}

TEST_CASE("grpc-timeout: what is left goes on in the finest unit that fits, never more") {
    CHECK(format_timeout(microseconds(0)) == "0n");
    CHECK(format_timeout(microseconds(-5)) == "0n");
    CHECK(format_timeout(microseconds(1)) == "1u");
    CHECK(format_timeout(microseconds(99'999'999)) == "99999999u");
    CHECK(format_timeout(microseconds(100'000'000)) == "100000m");
    CHECK(format_timeout(microseconds(100'000'999)) == "100000m");  // rounded down
    CHECK(format_timeout(microseconds(3'600'000'000LL * 24 * 365 * 100)) == "52560000M");
    CHECK(format_timeout(microseconds(3'600'000'000LL * 24 * 365 * 20000)) == "99999999H");
    for (long long us : {1LL, 999LL, 123'456'789LL, 9'876'543'210LL, 3'600'000'000'000LL}) {
        CAPTURE(us);
        auto again = parse_timeout(format_timeout(microseconds(us)));
        REQUIRE(again);
        CHECK(again->count() <= us);
        CHECK(again->count() >= us - us / 1000);  // within a unit's rounding
    }
}
