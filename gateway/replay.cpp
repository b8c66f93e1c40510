#include "gateway/replay.hpp"

#include "gateway/identity/client_ip.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "gateway/router.hpp"
#include "limiters/local/over_limit_cache.hpp"
#include "limiters/policy.hpp"
#include "limiters/redis/connection.hpp"
#include "limiters/redis/redis_chain.hpp"
#include "replay/trace.hpp"

namespace rategate::gateway {

namespace net = boost::asio;
using json = nlohmann::json;

namespace {

struct counts {
    std::uint64_t requests = 0, allowed = 0, limited = 0, delayed = 0, denied = 0;
};
struct limiter_counts {
    std::uint64_t limited = 0, shadow_limited = 0, denied_missing_key = 0;
};

void append_number(std::string& out, double v) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, end);
}

void append_string(std::string& out, std::string_view s) {
    out += json(s).dump();
}

// The Redis backend for replay: one connection, clock "gateway" (the trace's time).
class redis_backend {
  public:
    explicit redis_backend(const config::redis_config& r)
        : conn_(ioc_.get_executor(), settings(r),
                {{"chain", std::string(limiters::chain_script())}}) {
        if (r.cluster)
            throw std::runtime_error(
                "replay --backend redis speaks to one server or a Sentinel master, not to a Redis "
                "Cluster: replay with --backend local, or against a single Redis");
        conn_.start();
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (conn_.state() == limiters::redis::connection::health::down &&
               std::chrono::steady_clock::now() < until)
            ioc_.run_one_for(std::chrono::milliseconds(10));
        if (conn_.state() == limiters::redis::connection::health::down)
            throw std::runtime_error("cannot reach Redis: " + conn_.last_error());
    }
    /// Decides one request; `state` (if given) receives the deciding layer's state of a
    /// rejection, for the over-limit cache.
    limiters::chain_decision decide(const std::vector<limiters::layer_ref>& refs, double now_us,
                                    double cost, limiters::decided_state* state = nullptr) {
        std::vector<std::pair<const std::vector<limiters::layer_ref>*, double>> one{{&refs, cost}};
        std::vector<bool> want{state != nullptr};
        auto batch = limiters::encode_batch(one, now_us, &want);
        std::vector<std::string_view> keys(batch.keys.begin(), batch.keys.end());
        std::vector<std::string_view> args(batch.args.begin(), batch.args.end());
        auto fut = net::co_spawn(ioc_, conn_.eval(0, keys, args), net::use_future);
        while (fut.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
            ioc_.run_one();
        auto r = fut.get();
        if (r.ec) throw std::runtime_error("Redis call failed: " + r.ec.message());
        if (r.value.is_error()) throw std::runtime_error("Redis script error: " + r.value.str);
        std::vector<limiters::chain_decision> out;
        std::vector<limiters::decided_state> states;
        if (!limiters::decode_batch(r.value, out, &states) || out.size() != 1)
            throw std::runtime_error("malformed reply from the chain script");
        if (state) *state = std::move(states[0]);
        return out[0];
    }

  private:
    static limiters::redis::connection_settings settings(const config::redis_config& r) {
        auto s = limiters::connection_settings_of(r);
        s.command_timeout = std::chrono::milliseconds(10000);
        s.watchdog = std::chrono::milliseconds(20000);
        return s;
    }
    net::io_context ioc_{1};
    limiters::redis::connection conn_;
};

}  // namespace

int replay(const config::config& cfg, const std::string& trace_path, const std::string& backend,
           std::ostream& out, std::ostream& err) {
    std::ifstream in(trace_path);
    if (!in) {
        err << trace_path << ": cannot open trace\n";
        return 1;
    }
    if (backend != "local" && backend != "redis") {
        err << "rategate: --backend must be local or redis\n";
        return 2;
    }
    if (backend == "redis" && !cfg.redis) {
        err << cfg.source << ": redis: --backend redis needs a redis section in the config\n";
        return 1;
    }
    limiters::policy pol(cfg);
    route_table routes(cfg);
    limiters::local_store store;
    // Replay runs the gateway's over-limit cache in front of Redis (the trace's clock), so
    // that cache on and off can be compared decision by decision.
    limiters::over_limit_cache cache(cfg.redis && backend == "redis" ? cfg.redis->over_limit_cache
                                                                     : 0);
    std::uint64_t cache_hits = 0;
    double max_trace_cost = 0;  ///< the largest cost a trace line gave so far (debt bounds)
    std::unique_ptr<redis_backend> redis;
    try {
        if (backend == "redis") redis = std::make_unique<redis_backend>(*cfg.redis);
    } catch (const std::exception& e) {
        err << "rategate: " << e.what() << "\n";
        return 1;
    }

    std::map<std::string, counts> by_route;
    std::map<std::string, limiter_counts> by_limiter;
    counts total;
    limiters::policy::request_keys keys;
    std::string line, buffer;
    buffer.reserve(1 << 20);
    rategate::replay::trace_reader reader;
    try {
        while (std::getline(in, line)) {
            auto req = reader.next(line);
            if (!req) continue;
            auto fail = [&](const std::string& why) {
                throw rategate::replay::trace_error(reader.line_no(), why);
            };
            int route = -1;
            if (req->route) {
                route = pol.route_index(*req->route);
                if (route < 0) fail("no route named \"" + *req->route + "\"");
            } else {
                const auto* rc = routes.match(req->method, req->path, req->host);
                if (!rc) fail("no route matches " + req->path);
                route = static_cast<int>(rc - cfg.routes.data());
            }
            const auto& rc = cfg.routes[static_cast<std::size_t>(route)];
            std::optional<std::string_view> user;
            if (req->user) user = *req->user;
            double cost = req->cost.value_or(static_cast<double>(rc.cost));
            max_trace_cost = std::max(max_trace_cost, cost);
            double t_ms = req->t_ms;
            // The same canonical address the gateway would key (IPv4-mapped → IPv4, RFC 5952).
            auto canonical = identity::canonical_ip(req->ip);
            limiters::identity who{
                user, canonical ? std::string_view(*canonical) : std::string_view(req->ip),
                nullptr};
            if (!req->headers.empty())
                who.header = [&req](std::string_view name) { return req->header(name); };
            pol.keys_for(static_cast<std::size_t>(route), who, keys);

            auto& rcount = by_route[rc.name];
            ++rcount.requests;
            ++total.requests;
            buffer += "{\"route\":";
            append_string(buffer, rc.name);
            if (keys.denied_by) {
                ++rcount.denied;
                ++total.denied;
                ++by_limiter[keys.denied_by->limiter->name].denied_missing_key;
                buffer += ",\"allowed\":false,\"limiter\":";
                append_string(buffer, keys.denied_by->limiter->name);
                buffer += ",\"remaining\":0,\"retry_after_ms\":0,\"denied\":\"missing_key\"}\n";
            } else if (keys.invalid_by) {
                ++rcount.denied;
                ++total.denied;
                buffer += ",\"allowed\":false,\"limiter\":";
                append_string(buffer, keys.invalid_by->limiter->name);
                buffer +=
                    ",\"remaining\":0,\"retry_after_ms\":0,\"denied\":\"invalid_identity\"}\n";
            } else {
                double now_us = std::floor(t_ms * 1000.0);
                limiters::chain_decision d;
                bool cacheable = redis && cache.capacity() > 0 &&
                                 limiters::over_limit_cache::eligible(keys.layers);
                if (!redis) {
                    d = store.decide(keys.refs, now_us, cost);
                } else if (!cacheable) {
                    d = redis->decide(keys.refs, now_us, cost);
                } else if (auto hit =
                               cache.lookup(keys.layers, keys.refs, now_us, cost, max_trace_cost)) {
                    d = *hit;
                    ++cache_hits;
                } else {
                    limiters::decided_state state;
                    d = redis->decide(keys.refs, now_us, cost, &state);
                    cache.learn(keys.layers, keys.refs, d, state, 0);
                }
                bool has_delay = false;
                for (const auto* l : keys.layers)
                    has_delay = has_delay || l->spec.delay_us > 0;
                (d.allowed ? rcount.allowed : rcount.limited)++;
                (d.allowed ? total.allowed : total.limited)++;
                if (d.allowed && d.wait_us > 0) ++rcount.delayed, ++total.delayed;
                buffer += d.allowed ? ",\"allowed\":true,\"limiter\":"
                                    : ",\"allowed\":false,\"limiter\":";
                if (d.decider >= 0) {
                    const auto& name =
                        keys.layers[static_cast<std::size_t>(d.decider)]->limiter->name;
                    append_string(buffer, name);
                    ++by_limiter[name].limited;
                } else {
                    buffer += "null";
                }
                buffer += ",\"remaining\":";
                append_number(buffer, d.header_layer >= 0 ? d.remaining : -1);
                buffer += ",\"retry_after_ms\":";
                append_number(buffer, d.allowed ? 0 : std::ceil(d.retry_us / 1000.0));
                if (has_delay) {
                    buffer += ",\"wait_ms\":";
                    append_number(buffer, d.wait_us / 1000.0);
                }
                if (d.shadow_mask) {
                    buffer += ",\"shadow_limited\":[";
                    bool first = true;
                    for (std::size_t l = 0; l < keys.layers.size(); ++l) {
                        if (!(d.shadow_mask & (1u << l))) continue;
                        if (!first) buffer += ',';
                        first = false;
                        append_string(buffer, keys.layers[l]->limiter->name);
                        ++by_limiter[keys.layers[l]->limiter->name].shadow_limited;
                    }
                    buffer += ']';
                }
                buffer += "}\n";
            }
            if (buffer.size() > (1 << 20) - 4096) {
                out << buffer;
                buffer.clear();
            }
        }
    } catch (const rategate::replay::trace_error& e) {
        out << buffer;
        out.flush();
        err << trace_path << ":" << e.line_no() << ": " << e.reason() << "\n";
        return 1;
    } catch (const std::exception& e) {
        out << buffer;
        out.flush();
        err << e.what() << "\n";
        return 1;
    }
    out << buffer;
    json summary = {
        {"requests", total.requests}, {"allowed", total.allowed}, {"limited", total.limited},
        {"delayed", total.delayed},   {"denied", total.denied},   {"backend", backend},
        {"cache_hits", cache_hits},   {"routes", json::object()}, {"limiters", json::object()}};
    for (const auto& [name, c] : by_route)
        summary["routes"][name] = {{"requests", c.requests},
                                   {"allowed", c.allowed},
                                   {"limited", c.limited},
                                   {"delayed", c.delayed},
                                   {"denied", c.denied}};
    for (const auto& [name, c] : by_limiter)
        summary["limiters"][name] = {{"limited", c.limited},
                                     {"shadow_limited", c.shadow_limited},
                                     {"denied_missing_key", c.denied_missing_key}};
    out << json{{"summary", summary}}.dump() << "\n";
    return 0;
}

}  // namespace rategate::gateway
