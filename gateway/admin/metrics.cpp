#include "gateway/admin/metrics.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

namespace rategate::gateway {

void histogram::observe_us(double us) {
    double s = us / 1e6;
    std::size_t i = 0;
    while (i < bounds.size() && s > bounds[i])
        ++i;
    buckets_[i].add();
    count_.add();
    sum_us_.add(static_cast<std::uint64_t>(std::max(0.0, us)));
}

std::array<std::uint64_t, histogram::bounds.size() + 1> histogram::buckets() const {
    std::array<std::uint64_t, bounds.size() + 1> out{};
    for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = buckets_[i].get();
    return out;
}

void histogram::merge(const histogram& other) {
    for (std::size_t i = 0; i < buckets_.size(); ++i)
        buckets_[i].add(other.buckets_[i].get());
    count_.add(other.count_.get());
    sum_us_.add(other.sum_us_.get());
}

void loop_metrics::carry_over(const loop_metrics& old, const config::config& old_cfg,
                              const config::config& new_cfg) {
    // Routes by name; "no route" is the slot after the last route in both.
    auto carry_route = [&](std::size_t from, std::size_t to) {
        if (const auto* c = old.requests_.get(from)) requests_.at(to).merge(*c);
        if (const auto* h = old.request_latency.get(from)) request_latency.at(to).merge(*h);
    };
    for (std::size_t to = 0; to < new_cfg.routes.size(); ++to)
        for (std::size_t from = 0; from < old_cfg.routes.size(); ++from)
            if (old_cfg.routes[from].name == new_cfg.routes[to].name) carry_route(from, to);
    carry_route(old_cfg.routes.size(), new_cfg.routes.size());
    // Limiters and upstreams are std::maps: their index is the name order.
    std::size_t to = 0;
    for (const auto& [name, l] : new_cfg.limiters) {
        auto it = old_cfg.limiters.find(name);
        if (it != old_cfg.limiters.end()) {
            auto from = static_cast<std::size_t>(std::distance(old_cfg.limiters.begin(), it));
            for (std::size_t o = 0; o < limiter_decisions[to].size(); ++o)
                limiter_decisions[to][o].add(old.limiter_decisions[from][o].get());
            limiter_cache_hits[to].add(old.limiter_cache_hits[from].get());
        }
        ++to;
    }
    to = 0;
    for (const auto& [name, u] : new_cfg.upstreams) {
        auto it = old_cfg.upstreams.find(name);
        if (it != old_cfg.upstreams.end())
            upstream_latency[to].merge(old.upstream_latency[static_cast<std::size_t>(
                std::distance(old_cfg.upstreams.begin(), it))]);
        ++to;
    }
    redis_latency.merge(old.redis_latency);
    redis_calls.add(old.redis_calls.get());
    redis_decisions.add(old.redis_decisions.get());
    redis_errors.add(old.redis_errors.get());
    // Until the loop publishes again, readiness stays what it was (not "never checked").
    redis_state.store(old.redis_state.load(std::memory_order_relaxed), std::memory_order_relaxed);
    websocket_tunnels.add(old.websocket_tunnels.get());
}

const char* to_string(limiter_outcome o) {
    switch (o) {
        case limiter_outcome::allowed:
            return "allowed";
        case limiter_outcome::limited:
            return "limited";
        case limiter_outcome::shadow_limited:
            return "shadow_limited";
        case limiter_outcome::error:
            return "error";
        case limiter_outcome::delayed:
            return "delayed";
        case limiter_outcome::denied:
            return "denied";
        case limiter_outcome::count_:
            break;
    }
    return "?";
}

loop_metrics::loop_metrics(std::size_t routes, std::size_t limiters, std::size_t upstreams)
    : requests_(routes + 1),
      request_latency(routes + 1),
      upstream_latency(upstreams),
      limiter_decisions(limiters),
      limiter_cache_hits(limiters) {}

namespace {

// A label value, escaped as the exposition format requires.
std::string label(const std::string& v) {
    std::string out;
    for (char c : v) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

std::string number(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

void render_histogram(std::string& out, const std::string& name, const std::string& labels,
                      const std::vector<const histogram*>& parts) {
    std::array<std::uint64_t, histogram::bounds.size() + 1> sum{};
    std::uint64_t count = 0;
    double total = 0;
    for (const auto* h : parts) {
        auto b = h->buckets();
        for (std::size_t i = 0; i < sum.size(); ++i)
            sum[i] += b[i];
        count += h->count();
        total += h->sum_seconds();
    }
    std::uint64_t cumulative = 0;
    std::string sep = labels.empty() ? "" : ",";
    for (std::size_t i = 0; i < sum.size(); ++i) {
        cumulative += sum[i];
        out += name + "_bucket{" + labels + sep + "le=\"" +
               (i < histogram::bounds.size() ? number(histogram::bounds[i]) : std::string("+Inf")) +
               "\"} " + std::to_string(cumulative) + "\n";
    }
    std::string braces = labels.empty() ? "" : "{" + labels + "}";
    out += name + "_sum" + braces + " " + number(total) + "\n";
    out += name + "_count" + braces + " " + std::to_string(count) + "\n";
}

}  // namespace

// Responses of route `r` by status label, summed over the loops.
static std::map<std::string, std::uint64_t> statuses_of(
    const std::vector<const loop_metrics*>& loops, std::size_t r) {
    std::map<std::string, std::uint64_t> out;
    for (const auto* l : loops)
        if (const auto* c = l->requests_.get(r))
            c->for_each([&](const std::string& status, std::uint64_t n) { out[status] += n; });
    return out;
}

std::string render_metrics(const config::config& cfg, const std::vector<const loop_metrics*>& loops,
                           std::uint64_t open_connections, std::uint64_t reloads_ok,
                           std::uint64_t reloads_failed) {
    std::string out;
    out.reserve(16384);
    out += "# HELP rategate_requests_total Requests answered, by route and status.\n";
    out += "# TYPE rategate_requests_total counter\n";
    for (std::size_t r = 0; r <= cfg.routes.size(); ++r) {
        std::string route = r < cfg.routes.size() ? cfg.routes[r].name : "";
        for (const auto& [status, n] : statuses_of(loops, r))
            out += "rategate_requests_total{route=\"" + label(route) + "\",status=\"" + status +
                   "\"} " + std::to_string(n) + "\n";
    }
    out +=
        "# HELP rategate_request_duration_seconds Time from the request header to the end of the "
        "response.\n";
    out += "# TYPE rategate_request_duration_seconds histogram\n";
    for (std::size_t r = 0; r <= cfg.routes.size(); ++r) {
        std::vector<const histogram*> parts;
        for (const auto* l : loops)
            if (const auto* h = l->request_latency.get(r)) parts.push_back(h);
        render_histogram(out, "rategate_request_duration_seconds",
                         "route=\"" + label(r < cfg.routes.size() ? cfg.routes[r].name : "") + "\"",
                         parts);
    }
    out +=
        "# HELP rategate_upstream_duration_seconds Time from sending a request to its response "
        "header.\n";
    out += "# TYPE rategate_upstream_duration_seconds histogram\n";
    std::size_t u = 0;
    for (const auto& [name, up] : cfg.upstreams) {
        std::vector<const histogram*> parts;
        for (const auto* l : loops)
            parts.push_back(&l->upstream_latency[u]);
        render_histogram(out, "rategate_upstream_duration_seconds",
                         "upstream=\"" + label(name) + "\"", parts);
        ++u;
    }
    out += "# HELP rategate_limiter_decisions_total Limiter decisions, by limiter and outcome.\n";
    out += "# TYPE rategate_limiter_decisions_total counter\n";
    std::size_t li = 0;
    for (const auto& [name, l] : cfg.limiters) {
        for (std::size_t o = 0; o < static_cast<std::size_t>(limiter_outcome::count_); ++o) {
            std::uint64_t n = 0;
            for (const auto* loop : loops)
                n += loop->limiter_decisions[li][o].get();
            out += "rategate_limiter_decisions_total{limiter=\"" + label(name) + "\",outcome=\"" +
                   to_string(static_cast<limiter_outcome>(o)) + "\"} " + std::to_string(n) + "\n";
        }
        ++li;
    }
    out +=
        "# HELP rategate_limiter_cache_hits_total Rejections answered by the exact over-limit "
        "cache without Redis (also counted in rategate_limiter_decisions_total), by limiter.\n";
    out += "# TYPE rategate_limiter_cache_hits_total counter\n";
    li = 0;
    for (const auto& [name, l] : cfg.limiters) {
        std::uint64_t n = 0;
        for (const auto* loop : loops)
            n += loop->limiter_cache_hits[li].get();
        out += "rategate_limiter_cache_hits_total{limiter=\"" + label(name) + "\"} " +
               std::to_string(n) + "\n";
        ++li;
    }
    auto sum = [&](auto member) {
        std::uint64_t n = 0;
        for (const auto* l : loops)
            n += member(*l);
        return n;
    };
    auto line = [&](const char* name, const char* type, const char* help, std::uint64_t v) {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
               name + " " + std::to_string(v) + "\n";
    };
    line("rategate_redis_calls_total", "counter", "EVALSHA calls of the limiter chain script.",
         sum([](const loop_metrics& l) { return l.redis_calls.get(); }));
    line("rategate_redis_decisions_total", "counter", "Requests decided by those calls (batching).",
         sum([](const loop_metrics& l) { return l.redis_decisions.get(); }));
    line("rategate_over_limit_cache_entries", "gauge",
         "Keys held by the over-limit caches of every event loop.", sum([](const loop_metrics& l) {
             return static_cast<std::uint64_t>(l.cache_entries.load(std::memory_order_relaxed));
         }));
    line("rategate_redis_errors_total", "counter",
         "Limiter calls that failed (timeout, connection, script).",
         sum([](const loop_metrics& l) { return l.redis_errors.get(); }));
    line("rategate_redis_commands_total", "counter", "Redis commands written.",
         sum([](const loop_metrics& l) {
             return l.redis_commands.load(std::memory_order_relaxed);
         }));
    line("rategate_redis_writes_total", "counter",
         "Socket writes carrying those commands (pipeline depth).",
         sum([](const loop_metrics& l) { return l.redis_writes.load(std::memory_order_relaxed); }));
    line("rategate_redis_reconnects_total", "counter", "Reconnections to Redis.",
         sum([](const loop_metrics& l) {
             return l.redis_reconnects.load(std::memory_order_relaxed);
         }));
    line("rategate_redis_noscript_reloads_total", "counter", "NOSCRIPT replies answered with EVAL.",
         sum([](const loop_metrics& l) {
             return l.redis_noscript.load(std::memory_order_relaxed);
         }));
    line("rategate_redis_timeouts_total", "counter", "Redis commands that timed out.",
         sum([](const loop_metrics& l) {
             return l.redis_timeouts.load(std::memory_order_relaxed);
         }));
    line("rategate_redis_cluster_redirects_total", "counter",
         "Redis Cluster MOVED and ASK redirections followed.", sum([](const loop_metrics& l) {
             return l.cluster_redirects.load(std::memory_order_relaxed);
         }));
    line("rategate_redis_cluster_split_chains_total", "counter",
         "Requests whose limiter chain spans Redis Cluster slots (one call per slot).",
         sum([](const loop_metrics& l) {
             return l.cluster_split_chains.load(std::memory_order_relaxed);
         }));
    line("rategate_redis_cluster_refunds_total", "counter",
         "Refund calls undoing the parts a rejected split chain consumed.",
         sum([](const loop_metrics& l) {
             return l.cluster_refunds.load(std::memory_order_relaxed);
         }));
    line("rategate_redis_cluster_refund_failures_total", "counter",
         "Refunds that failed (their quota stays taken until it expires).",
         sum([](const loop_metrics& l) {
             return l.cluster_refund_failures.load(std::memory_order_relaxed);
         }));
    out += "# HELP rategate_redis_call_duration_seconds Latency of one limiter EVALSHA call.\n";
    out += "# TYPE rategate_redis_call_duration_seconds histogram\n";
    std::vector<const histogram*> redis_parts;
    for (const auto* l : loops)
        redis_parts.push_back(&l->redis_latency);
    render_histogram(out, "rategate_redis_call_duration_seconds", "", redis_parts);
    line("rategate_open_connections", "gauge", "Open client connections.", open_connections);
    line("rategate_upstream_idle_connections", "gauge", "Idle keep-alive connections to upstreams.",
         sum([](const loop_metrics& l) {
             return static_cast<std::uint64_t>(std::max<std::int64_t>(0, l.upstream_idle.load()));
         }));
    line("rategate_websocket_tunnels_open", "gauge", "Open WebSocket (upgraded) tunnels.",
         sum([](const loop_metrics& l) {
             return static_cast<std::uint64_t>(
                 std::max<std::int64_t>(0, l.websocket_tunnels_open.load()));
         }));
    line("rategate_websocket_tunnels_total", "counter", "WebSocket (upgraded) tunnels opened.",
         sum([](const loop_metrics& l) { return l.websocket_tunnels.get(); }));
    out += "# HELP rategate_config_reloads_total Configuration reloads, by outcome.\n";
    out += "# TYPE rategate_config_reloads_total counter\n";
    out +=
        "rategate_config_reloads_total{outcome=\"success\"} " + std::to_string(reloads_ok) + "\n";
    out += "rategate_config_reloads_total{outcome=\"failure\"} " + std::to_string(reloads_failed) +
           "\n";
    return out;
}

}  // namespace rategate::gateway

namespace rategate::gateway {

namespace {

nlohmann::json summed_buckets(const std::vector<const histogram*>& parts) {
    std::array<std::uint64_t, histogram::bounds.size() + 1> total{};
    for (const auto* h : parts) {
        auto b = h->buckets();
        for (std::size_t i = 0; i < total.size(); ++i)
            total[i] += b[i];
    }
    return nlohmann::json(total);
}

// %XX escapes of a key part back to bytes, for display (limiters/keys.cpp escapes them).
std::string unescape_key_part(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size()) {
            auto hex = [](char c) {
                return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            };
            int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
            if (hi >= 0 && lo >= 0) {
                out += static_cast<char>(hi * 16 + lo);
                i += 2;
                continue;
            }
        }
        out += s[i];
    }
    return out;
}

}  // namespace

std::string render_stats_json(const config::config& cfg,
                              const std::vector<const loop_metrics*>& loops,
                              std::uint64_t open_connections, double uptime_s) {
    using nlohmann::json;
    json out;
    out["time_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    out["uptime_s"] = uptime_s;
    out["open_connections"] = open_connections;
    out["latency_bounds"] = histogram::bounds;
    json routes = json::array();
    for (std::size_t r = 0; r <= cfg.routes.size(); ++r) {
        json statuses = json::object();
        for (const auto& [status, n] : statuses_of(loops, r))
            statuses[status] = n;
        if (r == cfg.routes.size() && statuses.empty()) continue;  // "no route" only when seen
        std::vector<const histogram*> parts;
        for (const auto* l : loops)
            if (const auto* h = l->request_latency.get(r)) parts.push_back(h);
        routes.push_back({{"name", r < cfg.routes.size() ? cfg.routes[r].name : "(no route)"},
                          {"statuses", statuses},
                          {"latency", summed_buckets(parts)}});
    }
    out["routes"] = routes;
    json limiters = json::array();
    std::size_t li = 0;
    for (const auto& [name, l] : cfg.limiters) {
        json outcomes = json::object();
        for (std::size_t o = 0; o < static_cast<std::size_t>(limiter_outcome::count_); ++o) {
            std::uint64_t n = 0;
            for (const auto* loop : loops)
                n += loop->limiter_decisions[li][o].get();
            outcomes[to_string(static_cast<limiter_outcome>(o))] = n;
        }
        limiters.push_back({{"name", name}, {"outcomes", outcomes}});
        ++li;
    }
    out["limiters"] = limiters;
    int state = -1;
    std::uint64_t calls = 0, errors = 0;
    std::vector<const histogram*> redis_parts;
    for (const auto* l : loops) {
        state = std::max(state, l->redis_state.load(std::memory_order_relaxed));
        calls += l->redis_calls.get();
        errors += l->redis_errors.get();
        redis_parts.push_back(&l->redis_latency);
    }
    static constexpr const char* states[] = {"connected", "degraded", "down"};
    out["redis"] = {{"configured", cfg.redis.has_value()},
                    {"state", cfg.redis ? (state >= 0 && state <= 2 ? states[state] : "starting")
                                        : "not configured"},
                    {"calls", calls},
                    {"errors", errors},
                    {"latency", summed_buckets(redis_parts)}};
    return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string render_top_json(const std::vector<const loop_metrics*>& loops,
                            std::string_view key_prefix, std::size_t limit) {
    admin::space_saving merged(256);
    for (const auto* l : loops)
        merged.merge(l->top());
    auto out = nlohmann::json::array();
    for (const auto& e : merged.top()) {
        if (out.size() >= limit) break;
        // Layer keys are PREFIX{LIMITER} and PREFIX LIMITER|{PARTS} (limiters/keys.hpp).
        std::string_view k = e.item;
        if (k.starts_with(key_prefix)) k.remove_prefix(key_prefix.size());
        if (k.starts_with('{')) k.remove_prefix(1);
        if (k.ends_with('}')) k.remove_suffix(1);
        auto bar = k.find('|');
        auto name = k.substr(0, bar);
        name = name.substr(0, name.find('~'));  // the shape tag follows the name
        std::string limiter = unescape_key_part(name);
        std::string parts;
        if (bar != std::string_view::npos) {
            auto rest = k.substr(bar + 1);
            if (rest.starts_with('{')) rest.remove_prefix(1);
            parts = std::string(rest);
        }
        out.push_back({{"limiter", limiter},
                       {"key", parts.empty() ? "(global)" : parts},
                       {"limited", e.count}});
    }
    return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace rategate::gateway
