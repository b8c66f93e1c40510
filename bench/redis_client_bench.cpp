// EVALSHA calls/s of a small script through rategate's Redis client with 1, 16 and 256
// concurrent coroutines on one event loop, and the mean commands per socket write.
// bench/redis_bench.sh runs it beside redis-benchmark -P 16 on the same script.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "limiters/redis/connection.hpp"

namespace net = boost::asio;
namespace po = boost::program_options;
using namespace rategate::limiters::redis;

int main(int argc, char** argv) {
    po::options_description opts("redis_client_bench");
    opts.add_options()("port", po::value<int>()->default_value(6379), "redis port")(
        "seconds", po::value<double>()->default_value(3), "seconds per concurrency level")(
        "script", po::value<std::string>()->default_value("return redis.call('INCR', KEYS[1])"),
        "Lua body");
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, opts), vm);
    connection_settings cs;
    cs.port = static_cast<std::uint16_t>(vm["port"].as<int>());
    cs.command_timeout = std::chrono::milliseconds(5000);
    cs.watchdog = std::chrono::milliseconds(10000);
    net::io_context ioc{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};  // as the gateway's event loops
    connection c(ioc.get_executor(), cs, {{"bench", vm["script"].as<std::string>()}});
    c.start();
    auto seconds = vm["seconds"].as<double>();
    for (int concurrency : {1, 16, 256}) {
        std::uint64_t done = 0, failed = 0;
        bool stop = false;
        auto before = c.stats();
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < concurrency; ++i)
            net::co_spawn(
                ioc,
                [&, i]() -> net::awaitable<void> {
                    co_await c.wait_up(std::chrono::steady_clock::now() + std::chrono::seconds(10));
                    std::string key = "bench:" + std::to_string(i % 1000);
                    std::vector<std::string_view> keys{key}, args;
                    while (!stop) {
                        auto r = co_await c.eval(0, keys, args);
                        if (r.ec || r.value.is_error())
                            ++failed;
                        else
                            ++done;
                    }
                },
                net::detached);
        net::steady_timer t(ioc, std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                     std::chrono::duration<double>(seconds)));
        t.async_wait([&](auto) { stop = true; });
        while (!stop)
            ioc.run_one();
        auto elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        for (int i = 0; i < 100; ++i)
            ioc.poll();
        ioc.run_for(std::chrono::milliseconds(200));  // let the last calls finish
        auto after = c.stats();
        double per_write = double(after.commands_written - before.commands_written) /
                           double(std::max<std::uint64_t>(1, after.writes - before.writes));
        std::printf("client concurrency=%d calls/s=%.0f failed=%llu commands/write=%.1f\n",
                    concurrency, done / elapsed, static_cast<unsigned long long>(failed),
                    per_write);
        std::fflush(stdout);
    }
}
