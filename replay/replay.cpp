#include "replay/replay.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "gateway/admin/metrics.hpp"
#include "gateway/http/request_normaliser.hpp"
#include "gateway/http/router.hpp"
#include "gateway/identity/client_ip.hpp"
#include "gateway/limiting/pipeline.hpp"
#include "limiters/redis/cluster.hpp"
#include "limiters/redis/connection.hpp"
#include "limiters/redis/deployment.hpp"
#include "replay/trace.hpp"

namespace rategate::replay {

namespace net = boost::asio;
using json = nlohmann::json;
using gateway::limiting::outcome;
using gateway::limiting::verdict;

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

// Redis for replay: one connection of the gateway's own deployment and backend
// (limiters/redis/deployment.hpp), with clock "gateway" (the trace's time) and patient timeouts
// (a replay waits rather than fails).
struct redis_store {
    limiters::redis::deployment deployment;
    std::unique_ptr<limiters::backend> backend;

    redis_store(net::io_context& ioc, const config::redis_config& r) {
        if (r.cluster)
            throw std::runtime_error(
                "replay --backend redis speaks to one server or a Sentinel master, not to a Redis "
                "Cluster: replay with --backend local, or against a single Redis");
        auto patient = r;
        patient.connections_per_thread = 1;
        patient.command_timeout = std::chrono::milliseconds(10000);
        deployment = limiters::redis::make_deployment(ioc.get_executor(), &patient);
        auto& conn = *deployment.connections.front();
        conn.start();
        // Readiness is a signal: wait for it (5 s at most), nothing polls.
        auto up = net::co_spawn(
            ioc, conn.wait_up(std::chrono::steady_clock::now() + std::chrono::seconds(5)),
            net::use_future);
        while (up.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
            ioc.run_one();
        if (!up.get()) throw std::runtime_error("cannot reach Redis: " + conn.last_error());
        backend = limiters::redis::make_backend(ioc.get_executor(), deployment.connections, nullptr,
                                                /*redis_clock=*/false, {});
    }
};

// One trace, line by line, through the pipeline; writes the decisions and the summary.
class replayer {
  public:
    replayer(const config::config& cfg, gateway::limiting::pipeline& pipe,
             const limiters::policy& pol, limiters::manual_clock& clock, std::string backend,
             std::ostream& out)
        : cfg_(cfg),
          pipe_(pipe),
          pol_(pol),
          clock_(clock),
          backend_(std::move(backend)),
          out_(out),
          routes_(cfg) {
        buffer_.reserve(1 << 20);
    }

    net::awaitable<void> run(std::istream& in) {
        std::string line;
        while (std::getline(in, line)) {
            auto req = reader_.next(line);
            if (!req) continue;
            co_await one(*req);
            if (buffer_.size() > (1 << 20) - 4096) flush();
        }
    }

    void flush() {
        out_ << buffer_;
        buffer_.clear();
    }
    std::size_t line_no() const { return reader_.line_no(); }

    void summary() {
        json s = {{"requests", total_.requests}, {"allowed", total_.allowed},
                  {"limited", total_.limited},   {"delayed", total_.delayed},
                  {"denied", total_.denied},     {"backend", backend_},
                  {"cache_hits", cache_hits_},   {"routes", json::object()},
                  {"limiters", json::object()}};
        for (const auto& [name, c] : by_route_)
            s["routes"][name] = {{"requests", c.requests},
                                 {"allowed", c.allowed},
                                 {"limited", c.limited},
                                 {"delayed", c.delayed},
                                 {"denied", c.denied}};
        for (const auto& [name, c] : by_limiter_)
            s["limiters"][name] = {{"limited", c.limited},
                                   {"shadow_limited", c.shadow_limited},
                                   {"denied_missing_key", c.denied_missing_key}};
        out_ << json{{"summary", s}}.dump() << "\n";
    }

  private:
    net::awaitable<void> one(const trace_line& req) {
        auto fail = [&](const std::string& why) { throw trace_error(reader_.line_no(), why); };
        int route = -1;
        if (req.route) {
            route = pol_.route_index(*req.route);
            if (route < 0) fail("no route named \"" + *req.route + "\"");
        } else {
            // Routed as the gateway routes a request: its target normalised (SPEC §3: merged
            // slashes, dot segments, escapes; the query aside) and its Host read as a Host
            // field (letter case, a trailing dot). A path the gateway would refuse is an error.
            const bool has_host = !req.host.empty();
            auto n = gateway::h1::normalise_request(
                {req.method, req.path, has_host ? 11u : 10u, has_host ? 1u : 0u, req.host});
            if (n.error)
                fail("the gateway would refuse this request (" + std::to_string(n.error->status) +
                     "): " + n.error->message);
            // A Host without a port means the listener's: 443 when it serves TLS (admission.cpp).
            const auto* rc =
                routes_.match(req.method, n.request->path, n.request->host, cfg_.tls ? 443 : 80);
            if (!rc) fail("no route matches " + req.path);
            route = static_cast<int>(rc - cfg_.routes.data());
        }
        auto index = static_cast<std::size_t>(route);
        const auto& rc = cfg_.routes[index];
        // A trace line is the identity as the gateway would have assembled it: the user, the
        // client address (canonical, as the gateway keys it) and header values.
        auto canonical = gateway::identity::canonical_ip(req.ip);
        headers_.clear();
        for (auto name : pol_.header_names(index))
            headers_.push_back({name, req.header(name)});
        std::optional<std::string_view> user;
        if (req.user) user = *req.user;
        limiters::identity who{user, canonical ? std::string_view(*canonical) : req.ip, headers_};
        clock_.set(std::floor(req.t_ms * 1000.0));
        const double cost = req.cost.value_or(static_cast<double>(rc.cost));
        // A trace's own cost is bounded as a route's cost is (config/routes.cpp check_cost):
        // past max_span_us the twins' retries and TTLs leave the range both backends compute
        // alike (the Redis reply turns a retry past 9.2e18 us into 0, the local twin does not).
        if (req.cost)
            for (const auto& name : rc.limiters)
                if (auto problem = config::cost_span_problem(cfg_.limiters.at(name), cost))
                    fail("\"cost\" is too large for limiter \"" + name + "\" " + *problem);
        auto o = co_await pipe_.check(index, who, cost);
        if (o.redis_error)
            throw std::runtime_error("Redis call failed: " + o.redis_error.message());
        // The chain as decided (skipped layers left out), whose positions the decision names.
        pol_.keys_for(index, who, keys_);
        record(rc, o, keys_.layers);
    }

    void record(const config::route_config& rc, const outcome& o,
                const std::vector<const limiters::policy::layer*>& layers) {
        auto& rcount = by_route_[rc.name];
        ++rcount.requests;
        ++total_.requests;
        buffer_ += "{\"route\":";
        append_string(buffer_, rc.name);
        if (o.what == verdict::denied || o.what == verdict::invalid_identity) {
            ++rcount.denied;
            ++total_.denied;
            buffer_ += ",\"allowed\":false,\"limiter\":";
            append_string(buffer_, o.decider->limiter->name);
            buffer_ += ",\"remaining\":0,\"retry_after_ms\":0,\"denied\":";
            if (o.what == verdict::denied) {
                ++by_limiter_[o.decider->limiter->name].denied_missing_key;
                buffer_ += "\"missing_key\"}\n";
            } else {
                buffer_ += "\"invalid_identity\"}\n";
            }
            return;
        }
        const auto& d = o.decision;
        if (o.cached) ++cache_hits_;
        bool has_delay = false;
        for (const auto* l : layers)
            has_delay = has_delay || l->spec.delay_us > 0;
        (d.allowed ? rcount.allowed : rcount.limited)++;
        (d.allowed ? total_.allowed : total_.limited)++;
        if (d.allowed && d.wait_us > 0) ++rcount.delayed, ++total_.delayed;
        buffer_ += d.allowed ? ",\"allowed\":true,\"limiter\":" : ",\"allowed\":false,\"limiter\":";
        if (d.decider >= 0) {
            const auto& name = layers[static_cast<std::size_t>(d.decider)]->limiter->name;
            append_string(buffer_, name);
            ++by_limiter_[name].limited;
        } else {
            buffer_ += "null";
        }
        buffer_ += ",\"remaining\":";
        append_number(buffer_, d.header_layer >= 0 ? d.remaining : -1);
        buffer_ += ",\"retry_after_ms\":";
        append_number(buffer_, d.allowed ? 0 : std::ceil(d.retry_us / 1000.0));
        if (has_delay) {
            buffer_ += ",\"wait_ms\":";
            append_number(buffer_, d.wait_us / 1000.0);
        }
        if (d.shadow_mask) {
            buffer_ += ",\"shadow_limited\":[";
            bool first = true;
            for (std::size_t l = 0; l < layers.size(); ++l) {
                if (!(d.shadow_mask & (1u << l))) continue;
                if (!first) buffer_ += ',';
                first = false;
                append_string(buffer_, layers[l]->limiter->name);
                ++by_limiter_[layers[l]->limiter->name].shadow_limited;
            }
            buffer_ += ']';
        }
        buffer_ += "}\n";
    }

    const config::config& cfg_;
    gateway::limiting::pipeline& pipe_;
    const limiters::policy& pol_;
    limiters::manual_clock& clock_;
    std::string backend_;
    std::ostream& out_;
    gateway::route_table routes_;
    trace_reader reader_;
    std::vector<limiters::header_value> headers_;
    limiters::policy::request_keys keys_;  ///< the decided chain of the line being recorded
    std::string buffer_;
    std::map<std::string, counts> by_route_;
    std::map<std::string, limiter_counts> by_limiter_;
    counts total_;
    std::uint64_t cache_hits_ = 0;
};

}  // namespace

int run_replay(const config::config& cfg, const std::string& trace_path, const std::string& backend,
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
    net::io_context ioc{1};
    limiters::policy pol(cfg);
    limiters::local_store store;
    limiters::manual_clock clock;
    gateway::loop_metrics metrics(cfg.routes.size(), cfg.limiters.size(), cfg.upstreams.size());
    std::unique_ptr<redis_store> redis;
    try {
        if (backend == "redis") redis = std::make_unique<redis_store>(ioc, *cfg.redis);
    } catch (const std::exception& e) {
        err << "rategate: " << e.what() << "\n";
        return 1;
    }
    // The gateway's pipeline, reporting waits instead of holding requests; with Redis it runs
    // the gateway's over-limit cache in front (cache on and off compare decision by decision).
    gateway::limiting::pipeline pipe(
        cfg, pol, store, metrics, redis ? redis->backend.get() : nullptr, clock,
        {gateway::limiting::pipeline::shaping::report, /*costs_beyond_routes=*/true});
    replayer r(cfg, pipe, pol, clock, backend, out);
    auto done = net::co_spawn(ioc, r.run(in), net::use_future);
    while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
        ioc.run_one();
    try {
        done.get();
    } catch (const trace_error& e) {
        r.flush();
        out.flush();
        err << trace_path << ":" << e.line_no() << ": " << e.reason() << "\n";
        return 1;
    } catch (const std::exception& e) {
        r.flush();
        out.flush();
        err << e.what() << "\n";
        return 1;
    }
    r.flush();
    r.summary();
    return 0;
}

}  // namespace rategate::replay
