// rategate command line (SPEC §1): run, check, --version, --help.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <boost/program_options.hpp>
#include <iostream>

#include "config/config.hpp"
#include "config/units.hpp"
#include "gateway/admin/access_log.hpp"
#include "gateway/runtime/reload.hpp"
#include "gateway/runtime/resource_check.hpp"
#include "replay/replay.hpp"

namespace po = boost::program_options;
using namespace rategate;

namespace {

constexpr const char* version = "rategate 0.1.0";

std::string describe_route(const config::config& c, const config::route_config& r) {
    std::string out = "route " + r.name + ": ";
    out += r.match.methods.empty() ? std::string("*") : "";
    for (std::size_t i = 0; i < r.match.methods.size(); ++i)
        out += (i ? "," : "") + r.match.methods[i];
    if (r.match.host) out += " host=" + *r.match.host;
    if (r.match.path) out += " " + *r.match.path;
    if (r.match.path_prefix) out += (r.match.path ? " | " : " ") + *r.match.path_prefix + "*";
    out += " -> " + r.upstream + " [";
    const auto& u = c.upstreams.at(r.upstream);
    for (std::size_t i = 0; i < u.targets.size(); ++i)
        out += (i ? ", " : "") + u.targets[i].to_string();
    out += "]";
    if (!r.strip_prefix.empty()) out += " strip " + r.strip_prefix;
    out += "\n  limiters: ";
    if (r.limiters.empty()) out += "none";
    for (std::size_t i = 0; i < r.limiters.size(); ++i) {
        const auto& l = c.limiters.at(r.limiters[i]);
        out += (i ? " -> " : "") + l.name + " (" + config::to_string(l.algo) + ", " +
               std::to_string(l.rules.size()) + (l.rules.size() == 1 ? " rule" : " rules") +
               (l.shadow ? ", shadow" : "") +
               (l.delay ? ", delay " + config::format_duration(*l.delay) : "") + ")";
    }
    return out;
}

int run_check(const std::string& file) {
    try {
        auto cfg = config::load_config(file);
        // What only OpenSSL and libjwt can tell: the certificate pairs and token keys load.
        std::vector<std::string> problems;
        for (const auto& p : gateway::check_resources(*cfg))
            problems.push_back(file + ": " + p);
        if (!problems.empty()) {
            for (const auto& p : problems)
                std::cerr << p << "\n";
            return 1;
        }
        std::cout
            << file << ": OK (" << cfg->routes.size() << " routes, " << cfg->upstreams.size()
            << " upstreams, " << cfg->limiters.size() << " limiters, "
            << (cfg->redis
                    ? (cfg->redis->cluster
                           ? "redis cluster via " +
                                 std::to_string(cfg->redis->cluster->nodes.size()) + " seed nodes"
                       : cfg->redis->sentinel
                           ? "redis sentinel master " + cfg->redis->sentinel->master + " via " +
                                 std::to_string(cfg->redis->sentinel->nodes.size()) + " sentinels"
                           : "redis " + cfg->redis->host + ":" + std::to_string(cfg->redis->port))
                    : std::string("in-process limiter state"))
            << ")\n";
        for (const auto& r : cfg->routes)
            std::cout << describe_route(*cfg, r) << "\n";
        return 0;
    } catch (const config::config_errors& e) {
        std::cerr << e.what();
        return 1;
    }
}

}  // namespace

int main(int argc, char** argv) {
    spdlog::set_default_logger(spdlog::stderr_color_mt("rategate"));
    po::options_description opts(
        "Usage: rategate [check|replay] --config FILE [options]\n\nOptions");
    opts.add_options()("help,h", "show this help")("version", "print the version")(
        "config,c", po::value<std::string>(), "config file (JSON, // comments allowed)")(
        "log-level", po::value<std::string>()->default_value(""),
        "trace, debug, info, warn, error or off (overrides the config's log.level)")(
        "trace", po::value<std::string>(), "replay: the JSON Lines trace to replay")(
        "backend", po::value<std::string>()->default_value("local"),
        "replay: local (in-process) or redis");
    // The command is positional; it is parsed like an option but not listed as one.
    po::options_description hidden;
    hidden.add_options()("command", po::value<std::string>(), "check | replay");
    po::options_description all;
    all.add(opts).add(hidden);
    po::positional_options_description pos;
    pos.add("command", 1);
    po::variables_map vm;
    try {
        po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        std::cerr << "rategate: " << e.what() << "\n" << opts;
        return 2;
    }
    if (vm.count("help")) {
        std::cout
            << opts << "\nCommands:\n  (none)   run the gateway until SIGINT/SIGTERM\n"
            << "  check    validate the config file and print each route with its limiter chain\n"
            << "  replay   --trace FILE [--backend local|redis]: recorded traffic through the "
               "limiter\n"
            << "           chains on the trace's clock; one JSON decision per line, then a "
               "summary\n";
        return 0;
    }
    if (vm.count("version")) {
        std::cout << version << "\n";
        return 0;
    }
    std::string command = vm.count("command") ? vm["command"].as<std::string>() : "";
    if (!vm.count("config")) {
        std::cerr << "rategate: --config FILE is required\n" << opts;
        return 2;
    }
    auto file = vm["config"].as<std::string>();
    auto level = vm["log-level"].as<std::string>();
    if (!level.empty() && spdlog::level::from_str(level) == spdlog::level::off && level != "off") {
        std::cerr << "rategate: unknown --log-level \"" << level << "\"\n";
        return 2;
    }
    // Replay's options elsewhere are a mistake to say, not to ignore (a serve that was meant
    // to be a replay).
    if (command != "replay" && (vm.count("trace") || !vm["backend"].defaulted())) {
        std::cerr << "rategate: --trace and --backend belong to replay\n";
        return 2;
    }
    if (command == "check") return run_check(file);
    if (command == "replay") {
        if (!vm.count("trace")) {
            std::cerr << "rategate: replay needs --trace FILE\n";
            return 2;
        }
        try {
            auto cfg = config::load_config(file);
            std::ios::sync_with_stdio(false);
            return replay::run_replay(*cfg, vm["trace"].as<std::string>(),
                                      vm["backend"].as<std::string>(), std::cout, std::cerr);
        } catch (const config::config_errors& e) {
            std::cerr << e.what();
            return 1;
        }
    }
    if (command.empty()) return gateway::serve(file, level);
    std::cerr << "rategate: unknown command \"" << command << "\" (expected check or replay)\n";
    return 2;
}
