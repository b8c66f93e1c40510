#include <doctest/doctest.h>

#include "gateway/http/grpc_status.hpp"

using namespace rategate::gateway;

TEST_CASE("grpc refusals: the SPEC's status table") {
    struct row {
        unsigned http;
        bool limited;
        int grpc;
    };
    const row rows[] = {{429, true, 8},  {503, true, 8},   {413, false, 8},  {401, false, 16},
                        {403, false, 7}, {404, false, 12}, {405, false, 12}, {400, false, 3},
                        {431, false, 3}, {502, false, 14}, {503, false, 14}, {504, false, 4},
                        {500, false, 2}, {429, false, 2}};
    for (const auto& r : rows) {
        CAPTURE(r.http);
        CAPTURE(r.limited);
        CHECK(grpc_status_for(r.http, r.limited) == r.grpc);
    }
}

TEST_CASE("grpc refusals: grpc-message is percent-encoded") {
    CHECK(grpc_percent_encode("Too many requests, please retry later") ==
          "Too many requests, please retry later");
    CHECK(grpc_percent_encode("100% used") == "100%25 used");
    CHECK(grpc_percent_encode("a\nb\tc") == "a%0Ab%09c");
    CHECK(grpc_percent_encode("caf\xc3\xa9") == "caf%C3%A9");
    CHECK(grpc_percent_encode("\x7f~ ") == "%7F~ ");
    CHECK(grpc_percent_encode("") == "");
}
