// The single-server Redis backend on a real redis-server: what it reports beside the decision.
#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "limiters/clock.hpp"
#include "limiters/redis/connection.hpp"
#include "limiters/redis/redis_backend.hpp"
#include "limiters/redis/redis_chain.hpp"
#include "limiters/redis/refund.hpp"
#include "tests/redis/chain_test_util.hpp"
#include "tests/support/redis_server.hpp"

namespace net = boost::asio;
using namespace rategate::limiters;
using namespace std::chrono_literals;
using rategate::config::algorithm;

TEST_CASE("redis backend, clock redis: the clock offset never puts local time behind Redis'") {
    // The offset maps local time to the limiter clock: the over-limit cache re-decides a cached
    // rejection at local now + offset, and a leased fixed window's permits expire at the
    // window's end - offset. Too small an offset keeps a refusal past the time Redis admits
    // again (SPEC §2: never a refusal it would admit) and a lease past its window. Before,
    // the offset was the script's TIME minus the local time at which the reply was handled,
    // short of the true offset by the reply's delay and the loop's: about -50,000 us when the
    // loop was busy 50 ms. Redis and the gateway read one host's clock here: the true offset
    // is 0.
    rategate::test::redis_server server;
    net::io_context ioc;
    std::vector<std::unique_ptr<redis::connection>> conns;
    conns.push_back(std::make_unique<redis::connection>(
        ioc.get_executor(), rategate::test::scripted_redis::settings(server.port()),
        std::vector<redis::script>{{"chain", std::string(chain_script())},
                                   {"give back", std::string(give_back_script())}}));
    conns[0]->start();
    REQUIRE(rategate::test::run(ioc, conns[0]->wait_up(std::chrono::steady_clock::now() + 5s)));
    redis_backend backend(ioc.get_executor(), conns, true);
    layer_spec spec{algorithm::token_bucket, {{1, 1e6, 5, 0}}, false, 0};
    std::vector<layer_ref> refs{{"offset:k", &spec}};
    wall_clock wall;
    for (auto busy : {0ms, 50ms}) {
        CAPTURE(busy.count());
        auto fut = net::co_spawn(ioc, backend.decide(refs, 1, wall, false), net::use_future);
        for (int i = 0; i < 20; ++i)
            ioc.poll();                     // the call goes out
        std::this_thread::sleep_for(busy);  // the loop is busy while the reply waits
        auto deadline = std::chrono::steady_clock::now() + 10s;
        while (fut.wait_for(0s) != std::future_status::ready) {
            REQUIRE(std::chrono::steady_clock::now() < deadline);
            ioc.run_one_for(10ms);
        }
        auto a = fut.get();
        REQUIRE_FALSE(a.ec);
        CHECK(a.decision.allowed);
        CHECK(a.clock_offset_us >= -1000);  // 1 ms for the two clocks' reading
        CHECK(a.clock_offset_us <= 1e6);    // and not absurdly early either
    }
}
