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
    std::uint64_t count() const { return count_.get(); }
    double sum_seconds() const { return static_cast<double>(sum_us_.get()) / 1e6; }

  private:
    std::array<counter, bounds.size() + 1> buckets_;
    counter count_, sum_us_;
};

/// Outcomes of limiter decisions (SPEC §4).
enum class limiter_outcome { allowed, limited, shadow_limited, error, delayed, denied, count_ };
const char* to_string(limiter_outcome o);

/// The metrics of one event loop.
struct loop_metrics {
    loop_metrics(std::size_t routes, std::size_t limiters, std::size_t upstreams);

    /// Requests by route (index; routes.size() = no route) and status (100..599).
    void request(std::size_t route, unsigned status) {
        requests_[route][status < 600 ? status : 599].add();
    }
    std::vector<std::array<counter, 600>> requests_;
    std::vector<histogram> request_latency;   ///< by route (last: no route)
    std::vector<histogram> upstream_latency;  ///< by upstream, time to the response header
    std::vector<std::array<counter, static_cast<std::size_t>(limiter_outcome::count_)>>
        limiter_decisions;
    histogram redis_latency;  ///< one EVALSHA call
    counter redis_calls, redis_decisions, redis_errors;
    std::atomic<std::uint64_t> redis_commands{0}, redis_writes{0}, redis_reconnects{0},
        redis_noscript{0},
        redis_timeouts{0};             ///< published from the connection by the loop's ticker
    std::atomic<int> redis_state{-1};  ///< -1 not configured, 0 connected, 1 degraded, 2 down
    std::atomic<std::int64_t> upstream_idle{0};
    std::atomic<std::int64_t> websocket_tunnels_open{0};  ///< upgraded connections open now
    counter websocket_tunnels;                            ///< upgraded connections opened

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
/// latency histogram; `latency_bounds` are the histogram's bucket upper bounds in seconds.
std::string render_stats_json(const config::config& cfg,
                              const std::vector<const loop_metrics*>& loops,
                              std::uint64_t open_connections, double uptime_s);

/// Admin `GET /top` (SPEC §4): `[{"limiter", "key", "limited"}]`, most limited first, merged
/// over every loop's last five minutes. `key_prefix` is stripped from the layer keys.
std::string render_top_json(const std::vector<const loop_metrics*>& loops,
                            std::string_view key_prefix, std::size_t limit = 50);

/// Renders the Prometheus text exposition (0.0.4) of every loop's metrics, summed.
std::string render_metrics(const config::config& cfg, const std::vector<const loop_metrics*>& loops,
                           std::uint64_t open_connections, std::uint64_t reloads_ok,
                           std::uint64_t reloads_failed);

}  // namespace rategate::gateway
