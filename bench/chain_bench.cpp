// Redis CPU per limiter decision for a 3-layer chain (global, route, user over 1,000 users):
// one EVALSHA per decision versus one EVALSHA per batch of 64 decisions. Redis CPU is read from
// INFO commandstats (time inside EVALSHA) and INFO cpu (the whole server), reset between modes.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <regex>

#include "limiters/redis/connection.hpp"
#include "limiters/redis_chain.hpp"

namespace net = boost::asio;
using namespace rategate::limiters;

namespace {

template <class T>
T run(net::io_context& ioc, net::awaitable<T> aw) {
    auto fut = net::co_spawn(ioc, std::move(aw), net::use_future);
    while (fut.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
        ioc.run_one();
    return fut.get();
}

double info_number(const std::string& info, const std::string& pattern) {
    std::smatch m;
    if (std::regex_search(info, m, std::regex(pattern))) return std::stod(m[1]);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    boost::program_options::options_description opts("chain_bench");
    opts.add_options()("port", boost::program_options::value<int>()->default_value(6379),
                       "redis port")("decisions",
                                     boost::program_options::value<int>()->default_value(64000),
                                     "decisions per mode");
    boost::program_options::variables_map vm;
    boost::program_options::store(boost::program_options::parse_command_line(argc, argv, opts), vm);
    net::io_context ioc{1};
    redis::connection_settings cs;
    cs.port = static_cast<std::uint16_t>(vm["port"].as<int>());
    cs.command_timeout = std::chrono::milliseconds(10000);
    cs.watchdog = std::chrono::milliseconds(20000);
    redis::connection conn(ioc.get_executor(), cs, {{"chain", std::string(chain_script())}});
    conn.start();
    while (conn.state() == redis::connection::health::down)
        ioc.run_one_for(std::chrono::milliseconds(10));

    layer_spec global{rategate::config::algorithm::token_bucket, {{1e9, 1e6, 1e9, 0}}, false, 0};
    layer_spec route{rategate::config::algorithm::token_bucket, {{1e9, 1e6, 1e9, 0}}, false, 0};
    layer_spec user{rategate::config::algorithm::token_bucket, {{1e6, 1e6, 1e6, 0}}, false, 0};
    std::vector<std::vector<layer_ref>> chains;
    for (int u = 0; u < 1000; ++u)
        chains.push_back({{"bench:{global}", &global},
                          {"bench:{route|r=orders}", &route},
                          {"bench:{user|u=" + std::to_string(u) + "}", &user}});
    const int decisions = vm["decisions"].as<int>();
    std::printf(
        "| mode | decisions | EVALSHA calls | Redis us/decision (in script) | Redis CPU "
        "us/decision (server) |\n");
    std::printf("|---|---:|---:|---:|---:|\n");
    for (int batch : {1, 64}) {
        auto reset = run(ioc, conn.exec(redis::command("CONFIG", "RESETSTAT")));
        auto cpu_before = run(ioc, conn.exec(redis::command("INFO", "cpu"))).value.str;
        int calls = decisions / batch, inflight = 0, next = 0, done = 0;
        auto one = [&](int first) -> net::awaitable<void> {
            std::vector<std::pair<const std::vector<layer_ref>*, double>> reqs;
            for (int i = 0; i < batch; ++i)
                reqs.push_back({&chains[(first + i) % chains.size()], 1});
            auto b = encode_batch(reqs, -1);
            std::vector<std::string_view> keys(b.keys.begin(), b.keys.end()),
                args(b.args.begin(), b.args.end());
            auto r = co_await conn.eval(0, keys, args);
            if (r.ec || r.value.is_error()) std::fprintf(stderr, "call failed\n");
            ++done;
            --inflight;
        };
        // 64 calls in flight: the client pipelines them, as the gateway's event loops would.
        while (done < calls) {
            while (inflight < 64 && next < calls) {
                ++inflight;
                net::co_spawn(ioc, one(next * batch), net::detached);
                ++next;
            }
            ioc.run_one();
        }
        auto stats = run(ioc, conn.exec(redis::command("INFO", "commandstats"))).value.str;
        auto cpu_after = run(ioc, conn.exec(redis::command("INFO", "cpu"))).value.str;
        double usec = info_number(stats, "cmdstat_evalsha:calls=\\d+,usec=(\\d+)");
        double cpu = (info_number(cpu_after, "used_cpu_user:([\\d.]+)") +
                      info_number(cpu_after, "used_cpu_sys:([\\d.]+)") -
                      info_number(cpu_before, "used_cpu_user:([\\d.]+)") -
                      info_number(cpu_before, "used_cpu_sys:([\\d.]+)")) *
                     1e6;
        std::printf("| %s | %d | %d | %.2f | %.2f |\n",
                    batch == 1 ? "one call per decision" : "batches of 64", decisions, calls,
                    usec / decisions, cpu / decisions);
        (void)reset;
    }
}
