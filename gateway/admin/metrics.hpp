// Per-event-loop metrics, summed by the admin endpoint at scrape time (SPEC §4). Each counter
// has one writer — its event loop — so an increment is a relaxed load and store, never a lock
// or a locked instruction on the request path.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "gateway/admin/top_keys.hpp"

namespace rategate::gateway {

/// A counter with a single writer thread and any number of readers.
class counter {
  public:
    void add(std::uint64_t n = 1) {
        v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    std::uint64_t get() const { return v_.load(std::memory_order_relaxed); }

  private:
    std::atomic<std::uint64_t> v_{0};
};

/// A latency histogram in seconds with Prometheus-style cumulative buckets (at render time).
class histogram {
  public:
    static constexpr std::array<double, 14> bounds{
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5};
    void observe_us(double us);
    std::array<std::uint64_t, bounds.size() + 1> buckets() const;  ///< non-cumulative, +Inf last
    /// Adds `other`'s observations, less `base`'s when given (a copy merged from `other`
    /// earlier: what was added already). The writer's thread only.
    void merge(const histogram& other, const histogram* base = nullptr);
    std::uint64_t count() const { return count_.get(); }
    double sum_seconds() const { return static_cast<double>(sum_us_.get()) / 1e6; }

  private:
    std::array<counter, bounds.size() + 1> buckets_;
    counter count_, sum_us_;
};

/// Responses by status for one route, in little memory (routes × event loops add up): up to
/// `slots` distinct statuses are counted exactly, any further ones by class ("5xx"). One writer
/// (the route's event loop), any readers.
class status_counters {
  public:
    static constexpr std::size_t slots = 16;
    void add(unsigned status) {
        for (std::size_t i = 0; i < slots; ++i) {
            auto s = status_[i].load(std::memory_order_relaxed);
            if (s == status) return count_[i].add();
            if (s == 0) {
                count_[i].add();
                status_[i].store(static_cast<std::uint16_t>(status), std::memory_order_release);
                return;
            }
        }
        overflow_[std::min(status / 100, 5u)].add();
    }
    /// Adds `other`'s counts, less `base`'s when given (a copy merged from `other` earlier:
    /// what was added already), status by status. The writer's thread only.
    void merge(const status_counters& other, const status_counters* base = nullptr) {
        for (std::size_t i = 0; i < slots; ++i)
            if (auto s = other.status_[i].load(std::memory_order_acquire))
                if (auto n = other.count_[i].get() - (base ? base->count_of(s) : 0)) add_n(s, n);
        for (std::size_t c = 0; c < overflow_.size(); ++c)
            overflow_[c].add(other.overflow_[c].get() - (base ? base->overflow_[c].get() : 0));
    }
    /// The count of `status` in its exact slot (0 when it has none).
    std::uint64_t count_of(unsigned status) const {
        for (std::size_t i = 0; i < slots; ++i)
            if (status_[i].load(std::memory_order_acquire) == status) return count_[i].get();
        return 0;
    }
    /// Calls f(label, count) for every status seen: "200", …, then "4xx"-style overflow labels.
    template <class F>
    void for_each(F&& f) const {
        for (std::size_t i = 0; i < slots; ++i)
            if (auto s = status_[i].load(std::memory_order_acquire))
                f(std::to_string(s), count_[i].get());
        for (unsigned c = 1; c <= 5; ++c)
            if (auto n = overflow_[c].get()) f(std::to_string(c) + "xx", n);
    }

  private:
    void add_n(unsigned status, std::uint64_t n) {
        for (std::size_t i = 0; i < slots; ++i) {
            auto s = status_[i].load(std::memory_order_relaxed);
            if (s == status) return count_[i].add(n);
            if (s == 0) {
                count_[i].add(n);
                status_[i].store(static_cast<std::uint16_t>(status), std::memory_order_release);
                return;
            }
        }
        overflow_[std::min(status / 100, 5u)].add(n);
    }
    std::array<std::atomic<std::uint16_t>, slots> status_{};
    std::array<counter, slots> count_;
    std::array<counter, 6> overflow_;
};

/// One T per index, allocated by the writer on first use, so that routes nobody calls cost a
/// pointer per event loop. at() is for the single writer; get() (nullptr when unused) for any
/// reader.
template <class T>
class lazy_slots {
  public:
    explicit lazy_slots(std::size_t n) : slots_(n) {}
    ~lazy_slots() {
        for (auto& s : slots_)
            delete s.load(std::memory_order_relaxed);
    }
    lazy_slots(const lazy_slots&) = delete;
    lazy_slots& operator=(const lazy_slots&) = delete;
    T& at(std::size_t i) {
        T* p = slots_[i].load(std::memory_order_relaxed);
        if (!p) {
            p = new T();
            slots_[i].store(p, std::memory_order_release);
        }
        return *p;
    }
    const T* get(std::size_t i) const { return slots_[i].load(std::memory_order_acquire); }
    std::size_t size() const { return slots_.size(); }

  private:
    std::vector<std::atomic<T*>> slots_;
};

/// Outcomes of limiter decisions (SPEC §4).
enum class limiter_outcome { allowed, limited, shadow_limited, error, delayed, denied, count_ };
const char* to_string(limiter_outcome o);
/// The protocol a request came in over (SPEC §3: HTTP/1.1 and HTTP/2 streams alike).
enum class request_protocol { http1, http2, count_ };
const char* to_string(request_protocol p);
/// Outcomes of configuration reloads.
enum class reload_outcome { success, failure, count_ };
const char* to_string(reload_outcome o);

/// One counter per value of the enum `E` (`count_` last), labelled with to_string(E).
template <class E, class C = counter>
struct by_enum : std::array<C, static_cast<std::size_t>(E::count_)> {
    using label_enum = E;
};
using outcome_counters = by_enum<limiter_outcome>;
using reload_counters = by_enum<reload_outcome, std::atomic<std::uint64_t>>;
using protocol_counters = by_enum<request_protocol>;
/// A level moved by any thread, or a copy of a total kept elsewhere (a Redis connection's),
/// stored rather than added to; read with a relaxed load.
using gauge = std::atomic<std::int64_t>;
using published_total = std::atomic<std::uint64_t>;

/// How many routes, limiters and upstreams a config has: the sizes of the metrics' shapes.
struct metric_dims {
    std::size_t routes = 0, limiters = 0, upstreams = 0;
};

/// The shapes a metric's storage takes: one value, or one per route (the last: no route),
/// per upstream or per limiter (name order). Each is its value type, or a container of it,
/// built from the config's sizes; the request path indexes them directly.
template <class T>
struct one : T {
    explicit one(const metric_dims&) {}
};
template <class T>
struct per_route : lazy_slots<T> {
    explicit per_route(const metric_dims& d) : lazy_slots<T>(d.routes + 1) {}
};
template <class T>
struct per_upstream : std::vector<T> {
    explicit per_upstream(const metric_dims& d) : std::vector<T>(d.upstreams) {}
};
template <class T>
struct per_limiter : std::vector<T> {
    explicit per_limiter(const metric_dims& d) : std::vector<T>(d.limiters) {}
};

enum class metric_kind { counter, gauge, histogram };

// Every metric, declared once (SPEC §4). Columns: where it is kept (`loop`: per event loop,
// summed at scrape time; `process`: once, by the server), its member, storage shape and value
// type, Prometheus type, name and labels (shape's, then value's), whether a reload carries it
// over (by route, limiter and upstream name), where /stats shows it ("" = not shown; `routes/x`
// and `limiters/x` are a field of each row) and its help text. The storage, the reload
// carry-over, the Prometheus text, /stats and the shutdown summary are all derived from it
// (metrics.cpp); the order is the exposition's.
// clang-format off
#define RATEGATE_METRICS(X)                                                                                   \
    X(loop, requests_, per_route, status_counters, counter, "rategate_requests_total", "route,status", true,   \
      "routes/statuses", "Requests answered, by route and status.")                                          \
    X(loop, requests_by_protocol, per_route, protocol_counters, counter,                                      \
      "rategate_requests_by_protocol_total", "route,protocol", true, "",                                     \
      "Requests answered, by route and protocol (http/1.1, h2; also in rategate_requests_total).")          \
    X(loop, request_latency, per_route, histogram, histogram, "rategate_request_duration_seconds", "route",   \
      true, "routes/latency", "Time from the request header to the end of the response.")                    \
    X(loop, upstream_latency, per_upstream, histogram, histogram, "rategate_upstream_duration_seconds",       \
      "upstream", true, "", "Time from sending a request to its response header.")                           \
    X(loop, limiter_decisions, per_limiter, outcome_counters, counter, "rategate_limiter_decisions_total",    \
      "limiter,outcome", true, "limiters/outcomes", "Limiter decisions, by limiter and outcome.")            \
    X(loop, limiter_cache_hits, per_limiter, counter, counter, "rategate_limiter_cache_hits_total",           \
      "limiter", true, "", "Rejections answered by the exact over-limit cache without Redis (also counted "  \
      "in rategate_limiter_decisions_total), by limiter.")                                                   \
    X(loop, redis_calls, one, counter, counter, "rategate_redis_calls_total", "", true, "redis/calls",        \
      "EVALSHA calls of the limiter chain script.")                                                          \
    X(loop, redis_decisions, one, counter, counter, "rategate_redis_decisions_total", "", true, "",           \
      "Requests decided by those calls (batching).")                                                         \
    X(loop, cache_entries, one, gauge, gauge, "rategate_over_limit_cache_entries", "", false, "",             \
      "Keys held by the over-limit caches of every event loop.")                                             \
    X(loop, redis_errors, one, counter, counter, "rategate_redis_errors_total", "", true, "redis/errors",     \
      "Limiter calls that failed (timeout, connection, script).")                                            \
    X(loop, lease_grants, one, counter, counter, "rategate_lease_grants_total", "", true, "",                 \
      "Calls that added permits to a leased layer's lease (SPEC §2 sync).")                                  \
    X(loop, lease_permits, one, counter, counter, "rategate_lease_permits_total", "", true, "",               \
      "Permits taken from Redis into leases.")                                                               \
    X(loop, lease_permits_expired, one, counter, counter, "rategate_lease_permits_expired_total", "", true,   \
      "", "Leased permits dropped unspent: expired, or beyond the lease's size.")                          \
    X(loop, lease_permits_given_back, one, counter, counter, "rategate_lease_permits_given_back_total", "",  \
      true, "", "Leased permits of idle leases given back to Redis unspent.")                              \
    X(loop, lease_permits_held, one, gauge, gauge, "rategate_lease_permits_held", "", false, "",              \
      "Unspent leased permits held by every event loop.")                                                    \
    X(loop, redis_commands, one, published_total, counter, "rategate_redis_commands_total", "", false, "",    \
      "Redis commands written.")                                                                             \
    X(loop, redis_writes, one, published_total, counter, "rategate_redis_writes_total", "", false, "",        \
      "Socket writes carrying those commands (pipeline depth).")                                             \
    X(loop, redis_reconnects, one, published_total, counter, "rategate_redis_reconnects_total", "", false,    \
      "", "Reconnections to Redis.")                                                                         \
    X(loop, redis_noscript, one, published_total, counter, "rategate_redis_noscript_reloads_total", "",       \
      false, "", "NOSCRIPT replies answered with EVAL.")                                                     \
    X(loop, redis_timeouts, one, published_total, counter, "rategate_redis_timeouts_total", "", false, "",    \
      "Redis commands that timed out.")                                                                      \
    X(loop, cluster_redirects, one, published_total, counter, "rategate_redis_cluster_redirects_total", "",   \
      false, "", "Redis Cluster MOVED and ASK redirections followed.")                                       \
    X(loop, cluster_split_chains, one, published_total, counter, "rategate_redis_cluster_split_chains_total", \
      "", false, "", "Requests whose limiter chain spans Redis Cluster slots (one call per slot).")          \
    X(loop, cluster_refunds, one, published_total, counter, "rategate_redis_cluster_refunds_total", "",       \
      false, "", "Refund calls undoing the parts a rejected split chain consumed.")                          \
    X(loop, cluster_refund_failures, one, published_total, counter,                                           \
      "rategate_redis_cluster_refund_failures_total", "", false, "",                                         \
      "Refunds that failed (their quota stays taken until it expires).")                                     \
    X(loop, redis_latency, one, histogram, histogram, "rategate_redis_call_duration_seconds", "", true,       \
      "redis/latency", "Latency of one limiter EVALSHA call.")                                               \
    X(process, open_connections, one, published_total, gauge, "rategate_open_connections", "", false,         \
      "open_connections", "Open client connections.")                                                        \
    X(loop, upstream_idle, one, gauge, gauge, "rategate_upstream_idle_connections", "", false, "",            \
      "Idle keep-alive connections to upstreams.")                                                           \
    X(loop, websocket_tunnels_open, one, gauge, gauge, "rategate_websocket_tunnels_open", "", false, "",      \
      "Open WebSocket (upgraded) tunnels.")                                                                  \
    X(loop, websocket_tunnels, one, counter, counter, "rategate_websocket_tunnels_total", "", true, "",       \
      "WebSocket (upgraded) tunnels opened.")                                                                \
    X(loop, http2_connections, one, counter, counter, "rategate_http2_connections_total", "", true, "",       \
      "HTTP/2 client connections (ALPN h2 or h2c).")                                                         \
    X(loop, http2_streams, one, counter, counter, "rategate_http2_streams_total", "", true, "",               \
      "HTTP/2 streams begun as requests (each also counted in rategate_requests_total).")                   \
    X(loop, http2_calm, one, counter, counter, "rategate_http2_enhance_your_calm_total", "", true, "",        \
      "HTTP/2 connections ended with GOAWAY ENHANCE_YOUR_CALM (rapid reset, floods, header-block bombs).")  \
    X(process, config_reloads, one, reload_counters, counter, "rategate_config_reloads_total", "outcome",     \
      false, "", "Configuration reloads, by outcome.")
// clang-format on

/// The shutdown summary of one event loop: `{member}` is that metric's total over the loop,
/// `{member.label}` its total over the series with that label value.
inline constexpr const char* summary_format =
    "limiter outcomes {limiter_decisions.allowed} allowed, {limiter_decisions.limited} limited, "
    "{limiter_decisions.delayed} delayed, {limiter_decisions.denied} denied, "
    "{limiter_decisions.error} error; {redis_decisions} decisions in {redis_calls} EVALSHA calls "
    "({redis_errors} failed); {redis_commands} Redis commands in {redis_writes} writes";

/// A metric's declaration, as data (for tests and tools).
struct metric_info {
    const char* member;
    metric_kind kind;
    const char* name;
    const char* labels;  ///< comma-separated
    bool carried;        ///< across reloads
    const char* stats;   ///< where /stats shows it ("" = not shown)
    const char* help;
};
#define RATEGATE_METRIC_INFO(where, member, shape, value, kind, name, labels, carried, stats, \
                             help)                                                            \
    metric_info{#member, metric_kind::kind, name, labels, carried, stats, help},
inline constexpr metric_info metric_table[] = {RATEGATE_METRICS(RATEGATE_METRIC_INFO)};
#undef RATEGATE_METRIC_INFO

// Declares the members kept in loop_metrics, or those kept in process_metrics.
#define RATEGATE_METRIC_IF_loop_IS_loop(...) __VA_ARGS__
#define RATEGATE_METRIC_IF_loop_IS_process(...)
#define RATEGATE_METRIC_IF_process_IS_loop(...)
#define RATEGATE_METRIC_IF_process_IS_process(...) __VA_ARGS__
#define RATEGATE_LOOP_METRIC_MEMBER(where, member, shape, value, ...) \
    RATEGATE_METRIC_IF_##where##_IS_loop(shape<value> member{dims};)
#define RATEGATE_PROCESS_METRIC_MEMBER(where, member, shape, value, ...) \
    RATEGATE_METRIC_IF_##where##_IS_process(shape<value> member{dims};)

/// The metrics kept once per process (by the server), declared in RATEGATE_METRICS.
struct process_metrics {
    const metric_dims dims{};
    RATEGATE_METRICS(RATEGATE_PROCESS_METRIC_MEMBER)
};

/// The metrics of one event loop: the members declared in RATEGATE_METRICS as `loop`, each
/// with a single writer (the loop) unless it is an atomic gauge or total.
struct loop_metrics {
    loop_metrics(std::size_t routes, std::size_t limiters, std::size_t upstreams)
        : dims{routes, limiters, upstreams} {}
    loop_metrics(const loop_metrics&) = delete;
    loop_metrics& operator=(const loop_metrics&) = delete;

    const metric_dims dims;
    RATEGATE_METRICS(RATEGATE_LOOP_METRIC_MEMBER)

    /// Requests by route (index; routes.size() = no route) and status (100..599).
    void request(std::size_t route, unsigned status,
                 request_protocol protocol = request_protocol::http1) {
        requests_.at(route).add(status < 600 ? status : 599);
        requests_by_protocol.at(route)[static_cast<std::size_t>(protocol)].add();
    }
    std::atomic<int> redis_state{-1};  ///< -1 not configured, 0 connected, 1 degraded, 2 down

    /// What carry_over takes from the other metrics.
    enum class carry_mode {
        reload,  ///< the counters declared `carried`, the Redis totals and state
        view,    ///< every metric, gauges included, and the Redis state
    };
    /// Adds `old`'s metrics (another config's: `old_cfg`; these are `new_cfg`'s) into these, by
    /// route, limiter and upstream name. `reload`: the previous runtime's metrics of this loop,
    /// on the loop's thread before the new runtime is installed, so counters of the process
    /// survive a reload (SPEC §5). `view`: into a copy the admin thread renders a loop with that
    /// has not installed the config in force yet (`old` is read while its loop writes it).
    void carry_over(const loop_metrics& old, const config::config& old_cfg,
                    const config::config& new_cfg, carry_mode mode = carry_mode::reload);
    /// Adds what the counters declared `carried` of `old` counted since `base` was made from
    /// them (carry_over(old, old_cfg, old_cfg) at the reload that carried `old` into the next
    /// runtime), by name: the requests that ended on a replaced runtime after the reload. On
    /// the loop's thread, into the runtime in force.
    void fold_since(const loop_metrics& old, const loop_metrics& base,
                    const config::config& old_cfg, const config::config& new_cfg);

    /// The keys this loop limited most (published by the loop's ticker, read by the admin).
    void set_top(admin::space_saving s) const {
        std::lock_guard lock(top_mutex_);
        top_ = std::move(s);
    }
    admin::space_saving top() const {
        std::lock_guard lock(top_mutex_);
        return top_;
    }

  private:
    mutable std::mutex top_mutex_;  ///< never taken on the request path
    mutable admin::space_saving top_;
};

/// The dashboard's JSON (admin `GET /stats`): cumulative request counts by route and status
/// with latency histograms, decisions by limiter and outcome, Redis health, calls, errors and
/// latency histogram (each metric where its declaration's `stats` column puts it);
/// `latency_bounds` are the histogram's bucket upper bounds in seconds.
std::string render_stats_json(const config::config& cfg, const process_metrics& process,
                              const std::vector<const loop_metrics*>& loops, double uptime_s);

/// Admin `GET /top` (SPEC §4): `[{"limiter", "key", "limited"}]`, most limited first, merged
/// over every loop's last five minutes. `key_prefix` is stripped from the layer keys.
std::string render_top_json(const std::vector<const loop_metrics*>& loops,
                            std::string_view key_prefix, std::size_t limit = 50);

/// Renders the Prometheus text exposition (0.0.4) of every declared metric: the process's, and
/// every loop's summed.
std::string render_metrics(const config::config& cfg, const process_metrics& process,
                           const std::vector<const loop_metrics*>& loops);

/// One event loop's shutdown summary (summary_format filled in from `m`).
std::string render_summary(const config::config& cfg, const loop_metrics& m);

}  // namespace rategate::gateway
