// The metrics declared in RATEGATE_METRICS (gateway/admin/metrics.hpp) and what is derived from
// the declaration: the Prometheus text, /stats, the shutdown summary and the reload carry-over.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "config/config.hpp"
#include "gateway/admin/metrics.hpp"

using namespace rategate;
using gateway::limiter_outcome;

namespace {

std::shared_ptr<const config::config> make_config(const char* second_route) {
    return config::parse_config(std::string(R"({
      "listen": "127.0.0.1:8080",
      "redis": { "url": "redis://127.0.0.1:1/0" },
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] },
                     "v": { "targets": ["127.0.0.1:9002"] } },
      "limiters": {
        "global": { "scope": "global", "algorithm": "token_bucket",
                    "rules": [{ "rate": 100, "period": "1s", "burst": 100 }] },
        "per-ip": { "scope": "ip", "algorithm": "token_bucket",
                    "rules": [{ "rate": 1, "period": "1h", "burst": 3 }] }
      },
      "routes": [ { "name": "api", "match": { "path_prefix": "/a" }, "upstream": "u",
                    "limiters": ["global"] },
                  { "name": ")") + second_route +
                                    R"(", "match": { "path_prefix": "/" }, "upstream": "v",
                    "limiters": ["per-ip"] } ]
    })",
                                "t.json");
}

gateway::loop_metrics metrics_of(const config::config& c) {
    return gateway::loop_metrics(c.routes.size(), c.limiters.size(), c.upstreams.size());
}

std::size_t at(limiter_outcome o) {
    return static_cast<std::size_t>(o);
}

// The lines of `text` that are samples of metric `name` (name, name{...}, name_bucket{...}).
std::vector<std::string> samples(const std::string& text, const std::string& name) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        if (line.starts_with('#') || !line.starts_with(name)) continue;
        auto rest = std::string_view(line).substr(name.size());
        if (rest.starts_with(' ') || rest.starts_with('{') || rest.starts_with("_bucket{") ||
            rest.starts_with("_sum") || rest.starts_with("_count"))
            out.push_back(line);
    }
    return out;
}

const char* type_of(gateway::metric_kind k) {
    return k == gateway::metric_kind::counter ? "counter"
           : k == gateway::metric_kind::gauge ? "gauge"
                                              : "histogram";
}

}  // namespace

TEST_CASE("metrics: every declared metric is in the Prometheus text, typed, with its help") {
    auto cfg = make_config("rest");
    auto m = metrics_of(*cfg);
    m.request(0, 200);
    gateway::process_metrics process;
    std::vector<const gateway::loop_metrics*> loops{&m};
    auto text = gateway::render_metrics(*cfg, process, loops);
    std::set<std::string> names;
    for (const auto& info : gateway::metric_table) {
        std::string name = info.name;
        CAPTURE(name);
        CHECK(names.insert(info.name).second);  // declared once
        CHECK(text.find(std::string("# HELP ") + info.name + " " + info.help + "\n") !=
              std::string::npos);
        CHECK(text.find(std::string("# TYPE ") + info.name + " " + type_of(info.kind) + "\n") !=
              std::string::npos);
        CHECK_FALSE(samples(text, info.name).empty());
    }
}

TEST_CASE("metrics: every metric declared for /stats is there, in each row of its group") {
    auto cfg = make_config("rest");
    auto m = metrics_of(*cfg);
    m.request(2, 404);  // no route: its row appears once seen
    gateway::process_metrics process;
    std::vector<const gateway::loop_metrics*> loops{&m};
    auto stats = nlohmann::json::parse(gateway::render_stats_json(*cfg, process, loops, 1));
    int shown = 0;
    for (const auto& info : gateway::metric_table) {
        std::string_view path = info.stats;
        if (path.empty()) continue;
        ++shown;
        std::string name = info.name;
        CAPTURE(name);
        auto slash = path.find('/');
        if (slash == std::string_view::npos) {
            CHECK(stats.contains(std::string(path)));
            continue;
        }
        auto group = stats[std::string(path.substr(0, slash))];
        auto field = std::string(path.substr(slash + 1));
        if (group.is_array()) {
            REQUIRE_FALSE(group.empty());
            for (const auto& row : group) {
                CHECK(row.contains("name"));
                CHECK(row.contains(field));
            }
        } else {
            CHECK(group.contains(field));
        }
    }
    CHECK(shown >= 7);
    CHECK(stats["routes"].size() == 3);
    CHECK(stats["routes"][2]["name"] == "(no route)");
    CHECK(stats["routes"][2]["statuses"]["404"] == 1);
    CHECK(stats["limiters"].size() == 2);
    CHECK(stats["redis"]["state"] == "starting");
}

TEST_CASE("metrics: loops are summed; the process's metrics are rendered once") {
    auto cfg = make_config("rest");
    auto a = metrics_of(*cfg), b = metrics_of(*cfg);
    a.limiter_decisions[1][at(limiter_outcome::limited)].add(2);
    b.limiter_decisions[1][at(limiter_outcome::limited)].add(3);
    a.redis_commands.store(7);
    b.redis_commands.store(5);
    a.upstream_idle.store(-2);  // a gauge below zero reads as zero
    b.upstream_idle.store(4);
    a.request_latency.at(0).observe_us(300);
    gateway::process_metrics process;
    process.open_connections.store(9);
    process.config_reloads[static_cast<std::size_t>(gateway::reload_outcome::failure)].store(1);
    std::vector<const gateway::loop_metrics*> loops{&a, &b};
    auto text = gateway::render_metrics(*cfg, process, loops);
    auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
    CHECK(has(R"(rategate_limiter_decisions_total{limiter="per-ip",outcome="limited"} 5)"));
    CHECK(has(R"(rategate_limiter_decisions_total{limiter="global",outcome="allowed"} 0)"));
    CHECK(has("rategate_redis_commands_total 12"));
    CHECK(has("rategate_upstream_idle_connections 4"));
    CHECK(has("rategate_open_connections 9"));
    CHECK(has(R"(rategate_config_reloads_total{outcome="success"} 0)"));
    CHECK(has(R"(rategate_config_reloads_total{outcome="failure"} 1)"));
    CHECK(has(R"(rategate_request_duration_seconds_count{route="api"} 1)"));
    CHECK(has(R"(rategate_request_duration_seconds_count{route=""} 0)"));
}

TEST_CASE("metrics: the shutdown summary reads the declared metrics") {
    auto cfg = make_config("rest");
    auto m = metrics_of(*cfg);
    m.limiter_decisions[0][at(limiter_outcome::allowed)].add(4);
    m.limiter_decisions[1][at(limiter_outcome::allowed)].add(1);
    m.limiter_decisions[1][at(limiter_outcome::limited)].add(2);
    m.limiter_decisions[1][at(limiter_outcome::shadow_limited)].add(9);  // not in the summary
    m.redis_calls.add(3);
    m.redis_decisions.add(6);
    m.redis_errors.add(1);
    m.redis_commands.store(8);
    m.redis_writes.store(2);
    CHECK(gateway::render_summary(*cfg, m) ==
          "limiter outcomes 5 allowed, 2 limited, 0 delayed, 0 denied, 0 error; 6 decisions in "
          "3 EVALSHA calls (1 failed); 8 Redis commands in 2 writes");
}

TEST_CASE("metrics: a reload carries the declared counters over by name, not the gauges") {
    auto old_cfg = make_config("rest");
    auto new_cfg = make_config("renamed");  // "api" stays, "rest" goes, "renamed" is new
    auto old = metrics_of(*old_cfg);
    old.request(0, 200);
    old.request(1, 500);
    old.request(2, 404);  // no route
    old.request_latency.at(0).observe_us(100);
    old.upstream_latency[1].observe_us(100);
    old.limiter_decisions[1][at(limiter_outcome::denied)].add(3);
    old.limiter_cache_hits[0].add(4);
    old.redis_calls.add(5);
    old.redis_latency.observe_us(10);
    old.websocket_tunnels.add(6);
    old.websocket_tunnels_open.store(2);
    old.redis_commands.store(7);  // the connection's total: the start until published again
    old.cache_entries.store(8);
    old.redis_state.store(1);
    auto next = metrics_of(*new_cfg);
    next.carry_over(old, *old_cfg, *new_cfg);
    std::vector<std::string> statuses;
    next.requests_.get(0)->for_each([&](const std::string& s, std::uint64_t n) {
        statuses.push_back(s + "=" + std::to_string(n));
    });
    CHECK(statuses == std::vector<std::string>{"200=1"});
    CHECK(next.requests_.get(1) == nullptr);  // "renamed" is another route
    REQUIRE(next.requests_.get(2) != nullptr);
    CHECK(next.request_latency.get(0)->count() == 1);
    CHECK(next.upstream_latency[1].count() == 1);
    CHECK(next.limiter_decisions[1][at(limiter_outcome::denied)].get() == 3);
    CHECK(next.limiter_cache_hits[0].get() == 4);
    CHECK(next.redis_calls.get() == 5);
    CHECK(next.redis_latency.count() == 1);
    CHECK(next.websocket_tunnels.get() == 6);
    CHECK(next.websocket_tunnels_open.load() == 0);
    CHECK(next.redis_commands.load() == 7);  // never 0 between a reload and the next store
    CHECK(next.cache_entries.load() == 0);
    CHECK(next.redis_state.load() == 1);
    for (const auto& info : gateway::metric_table)
        if (info.kind == gateway::metric_kind::gauge) CHECK_FALSE(info.carried);
}

TEST_CASE("metrics: what a replaced runtime counts after the reload folds in once, by name") {
    auto old_cfg = make_config("rest");
    auto new_cfg = make_config("renamed");
    auto old = metrics_of(*old_cfg);
    old.request(0, 200);
    old.request(0, 503);
    old.request_latency.at(0).observe_us(100);
    old.limiter_decisions[1][at(limiter_outcome::allowed)].add(2);
    old.redis_calls.add(1);
    // The reload: the next runtime's metrics start from these, and `base` keeps what they were.
    auto next = metrics_of(*new_cfg);
    next.carry_over(old, *old_cfg, *new_cfg);
    auto base = metrics_of(*old_cfg);
    base.carry_over(old, *old_cfg, *old_cfg);
    // Requests still in flight on the old runtime end there; new ones count in the next.
    old.request(0, 200);
    old.request(0, 404);  // a status first seen after the reload
    old.request(1, 200);  // "rest": gone from the new config
    old.request_latency.at(0).observe_us(1e6);
    old.limiter_decisions[1][at(limiter_outcome::allowed)].add(3);
    old.redis_calls.add(4);
    old.cache_entries.store(9);  // a gauge: never folded
    next.request(0, 200);
    next.fold_since(old, base, *old_cfg, *new_cfg);
    std::vector<std::string> statuses;
    next.requests_.get(0)->for_each([&](const std::string& s, std::uint64_t n) {
        statuses.push_back(s + "=" + std::to_string(n));
    });
    CHECK(statuses == std::vector<std::string>{"200=3", "503=1", "404=1"});
    CHECK(next.requests_.get(1) == nullptr);
    CHECK(next.request_latency.get(0)->count() == 2);
    CHECK(next.request_latency.get(0)->buckets().back() == 0);  // 1 s is the 1 s bucket
    CHECK(next.limiter_decisions[1][at(limiter_outcome::allowed)].get() == 5);
    CHECK(next.redis_calls.get() == 5);
    CHECK(next.cache_entries.load() == 0);
}

TEST_CASE("metrics: a view shows a loop's metrics, gauges too, in another config's shape") {
    auto old_cfg = make_config("rest");
    auto new_cfg = make_config("renamed");
    auto old = metrics_of(*old_cfg);
    old.request(0, 200);
    old.request(1, 200);
    old.redis_calls.add(2);
    old.cache_entries.store(3);
    old.redis_commands.store(4);
    old.redis_state.store(0);
    gateway::process_metrics process;
    auto view = metrics_of(*new_cfg);
    view.carry_over(old, *old_cfg, *new_cfg, gateway::loop_metrics::carry_mode::view);
    auto text = gateway::render_metrics(*new_cfg, process, {&view});
    CHECK(samples(text, "rategate_requests_total") ==
          std::vector<std::string>{R"(rategate_requests_total{route="api",status="200"} 1)"});
    CHECK(samples(text, "rategate_redis_calls_total") ==
          std::vector<std::string>{"rategate_redis_calls_total 2"});
    CHECK(samples(text, "rategate_over_limit_cache_entries") ==
          std::vector<std::string>{"rategate_over_limit_cache_entries 3"});
    CHECK(samples(text, "rategate_redis_commands_total") ==
          std::vector<std::string>{"rategate_redis_commands_total 4"});
    CHECK(view.redis_state.load() == 0);
}
