// Redis CPU per limiter decision of the chain script, read from INFO commandstats (time inside
// EVALSHA) and INFO cpu (the whole server), reset before each measured run. Scenarios:
//   chain4  token buckets global, route, user (1,000 users), ip (100 addresses); clock "redis"
//   chain3  the older 3-layer chain (global, route, user)
//   layer:A one layer of algorithm A (fixed_window, sliding_window_counter, leaky_bucket,
//           token_bucket, gcra) over 1,000 keys, limits far above the load: the cost of one
//           per-user layer by algorithm (each request its own key, as a user or ip layer)
//   log     sliding_window_log, --limit per 1 s window, 16 keys filled to the limit, 64 requests
//           per call (4 per key) arriving at twice the limit: steady state with the log full
// One line per run: `scenario=... batch=... decisions=... evalsha_us=... cpu_us=... calls=...`
// (µs per decision), then the inner commands per decision.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>

#include "limiters/redis/connection.hpp"
#include "limiters/redis/redis_chain.hpp"

namespace net = boost::asio;
namespace po = boost::program_options;
using namespace rategate::limiters;
using rategate::config::algorithm;

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

double server_cpu_us(const std::string& info) {
    return (info_number(info, "used_cpu_user:([\\d.]+)") +
            info_number(info, "used_cpu_sys:([\\d.]+)")) *
           1e6;
}

}  // namespace

int main(int argc, char** argv) {
    po::options_description opts("chain_bench");
    opts.add_options()("port", po::value<int>()->default_value(6379), "redis port")(
        "decisions", po::value<int>()->default_value(64000), "decisions per run")(
        "scenario", po::value<std::string>()->default_value("chain4"), "chain4, chain3 or log")(
        "batch", po::value<int>()->default_value(64), "decisions per EVALSHA")(
        "limit", po::value<double>()->default_value(10), "log: limit per 1 s window");
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, opts), vm);
    const std::string scenario = vm["scenario"].as<std::string>();
    const int batch = vm["batch"].as<int>();
    const double limit = vm["limit"].as<double>();
    const int decisions = vm["decisions"].as<int>() / batch * batch;

    net::io_context ioc{1};
    redis::connection_settings cs;
    cs.port = static_cast<std::uint16_t>(vm["port"].as<int>());
    cs.command_timeout = std::chrono::milliseconds(60000);
    cs.watchdog = std::chrono::milliseconds(120000);
    redis::connection conn(ioc.get_executor(), cs, {{"chain", std::string(chain_script())}});
    conn.start();
    auto up = net::co_spawn(
        ioc, conn.wait_up(std::chrono::steady_clock::now() + std::chrono::seconds(10)),
        net::use_future);
    while (up.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
        ioc.run_one();
    if (!up.get()) {
        std::fprintf(stderr, "cannot reach Redis: %s\n", conn.last_error().c_str());
        return 1;
    }

    layer_spec big{algorithm::token_bucket, {{1e9, 1e6, 1e9, 0}}, false, 0};
    layer_spec user{algorithm::token_bucket, {{1e6, 1e6, 1e6, 0}}, false, 0};
    layer_spec log{algorithm::sliding_window_log, {{limit, 1e6, 0, 0}}, false, 0};
    std::vector<std::vector<layer_ref>> chains;
    double now = -1, step = 0;  // clock "redis" unless the scenario drives the time
    if (scenario == "chain4" || scenario == "chain3") {
        for (int u = 0; u < 1000; ++u) {
            chains.push_back({{"bench:{global}", &big},
                              {"bench:{route|r=orders}", &big},
                              {"bench:{user|u=" + std::to_string(u) + "}", &user}});
            if (scenario == "chain4")
                chains.back().push_back(
                    {"bench:{ip|ip=10.0.0." + std::to_string(u % 100) + "}", &user});
        }
    } else if (scenario.starts_with("layer:")) {
        static const std::map<std::string, layer_spec> by_name = {
            {"fixed_window", {algorithm::fixed_window, {{1e9, 1e6, 0, 0}}, false, 0}},
            {"sliding_window_counter",
             {algorithm::sliding_window_counter, {{1e9, 1e6, 10, 0}}, false, 0}},
            {"leaky_bucket", {algorithm::leaky_bucket, {{1e6, 1e6, 1e6, 0}}, false, 0}},
            {"token_bucket", {algorithm::token_bucket, {{1e6, 1e6, 1e6, 0}}, false, 0}},
            {"gcra", {algorithm::gcra, {{1e6, 1e6, 1e6, 0}}, false, 0}},
        };
        auto it = by_name.find(scenario.substr(6));
        if (it == by_name.end()) {
            std::fprintf(stderr, "unknown algorithm in %s\n", scenario.c_str());
            return 2;
        }
        for (int u = 0; u < 1000; ++u)
            chains.push_back({{"bench:{layer|u=" + std::to_string(u) + "}", &it->second}});
    } else if (scenario == "log") {
        constexpr int keys = 16;
        // Each key sees batch / keys requests per call; twice the limit per window.
        const double per_call = static_cast<double>(batch) / keys;
        now = 1'700'000'000'000'000.0;
        step = std::floor(1e6 * per_call / (2 * limit));
        run(ioc, conn.exec(redis::command("FLUSHALL")));
        for (int k = 0; k < keys; ++k)
            chains.push_back({{"bench:{log|ip=10.0.1." + std::to_string(k) + "}", &log}});
        // Fill each log through the script itself (whatever member form it writes): 64
        // requests per call, the calls spread evenly over the window before the first decision.
        const int fills = static_cast<int>(std::ceil(limit / 64));
        for (int k = 0; k < keys; ++k) {
            for (int f = 0; f < fills; ++f) {
                std::vector<std::pair<const std::vector<layer_ref>*, double>> reqs(64,
                                                                                   {&chains[k], 1});
                auto b = encode_batch(reqs, now - 1e6 + std::floor(1e6 * (f + 1) / (fills + 1)));
                std::vector<std::string_view> keys_v(b.keys.begin(), b.keys.end()),
                    args(b.args.begin(), b.args.end());
                auto r = run(ioc, conn.eval(0, keys_v, args));
                if (r.ec || r.value.is_error()) {
                    std::fprintf(stderr, "prefill failed: %s\n", r.value.str.c_str());
                    return 1;
                }
            }
        }
    } else {
        std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
        return 2;
    }

    run(ioc, conn.exec(redis::command("CONFIG", "RESETSTAT")));
    auto cpu_before = server_cpu_us(run(ioc, conn.exec(redis::command("INFO", "cpu"))).value.str);
    const int calls = decisions / batch;
    int inflight = 0, next = 0, done = 0, failed = 0;
    auto one = [&](int first, double at) -> net::awaitable<void> {
        std::vector<std::pair<const std::vector<layer_ref>*, double>> reqs;
        for (int i = 0; i < batch; ++i)
            reqs.push_back({&chains[(first + i) % chains.size()], 1});
        auto b = encode_batch(reqs, at);
        std::vector<std::string_view> keys(b.keys.begin(), b.keys.end()),
            args(b.args.begin(), b.args.end());
        auto r = co_await conn.eval(0, keys, args);
        if (r.ec || r.value.is_error()) {
            if (++failed == 1) std::fprintf(stderr, "call failed: %s\n", r.value.str.c_str());
        }
        ++done;
        --inflight;
    };
    // 64 calls in flight: the client pipelines them, as the gateway's event loops would.
    while (done < calls) {
        while (inflight < 64 && next < calls) {
            ++inflight;
            double at = now < 0 ? -1 : now + step * (next + 1);
            net::co_spawn(ioc, one(next * batch, at), net::detached);
            ++next;
        }
        ioc.run_one();
    }
    auto stats = run(ioc, conn.exec(redis::command("INFO", "commandstats"))).value.str;
    auto cpu_after = server_cpu_us(run(ioc, conn.exec(redis::command("INFO", "cpu"))).value.str);
    double usec = info_number(stats, "cmdstat_evalsha:calls=\\d+,usec=(\\d+)");
    std::string label =
        scenario == "log" ? "log" + std::to_string(static_cast<long long>(limit)) : scenario;
    std::printf(
        "scenario=%s batch=%d decisions=%d calls=%d evalsha_us=%.3f cpu_us=%.3f failed=%d\n",
        label.c_str(), batch, decisions, calls, usec / decisions,
        (cpu_after - cpu_before) / decisions, failed);
    // The commands the script ran, per decision.
    std::regex line("cmdstat_([a-z]+):calls=(\\d+),usec=(\\d+)");
    for (std::sregex_iterator it(stats.begin(), stats.end(), line), end; it != end; ++it) {
        std::string name = (*it)[1];
        if (name == "evalsha" || name == "config" || name == "info" || name == "eval" ||
            name == "flushall" || name == "ping" || name == "script")
            continue;
        std::printf("  %s: %.3f calls/decision, %.3f us/decision\n", name.c_str(),
                    std::stod((*it)[2]) / decisions, std::stod((*it)[3]) / decisions);
    }
    return failed ? 1 : 0;
}
