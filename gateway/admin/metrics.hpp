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
    /// Adds `other`'s observations (the writer's thread only).
    void merge(const histogram& other);
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
    /// Adds `other`'s counts (the writer's thread only).
    void merge(const status_counters& other) {
        for (std::size_t i = 0; i < slots; ++i)
            if (auto s = other.status_[i].load(std::memory_order_acquire))
                if (auto n = other.count_[i].get()) add_n(s, n);
        for (std::size_t c = 0; c < overflow_.size(); ++c)
            overflow_[c].add(other.overflow_[c].get());
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

/// The metrics of one event loop.
struct loop_metrics {
    loop_metrics(std::size_t routes, std::size_t limiters, std::size_t upstreams);

    /// Requests by route (index; routes.size() = no route) and status (100..599).
    void request(std::size_t route, unsigned status) {
        requests_.at(route).add(status < 600 ? status : 599);
    }
    lazy_slots<status_counters> requests_;
    lazy_slots<histogram> request_latency;    ///< by route (last: no route)
    std::vector<histogram> upstream_latency;  ///< by upstream, time to the response header
    std::vector<std::array<counter, static_cast<std::size_t>(limiter_outcome::count_)>>
        limiter_decisions;
    std::vector<counter> limiter_cache_hits;     ///< by limiter: rejections answered by the
                                                 ///< over-limit cache (also counted as limited)
    std::atomic<std::int64_t> cache_entries{0};  ///< over-limit cache size, published by the ticker
    histogram redis_latency;                     ///< one EVALSHA call
    counter redis_calls, redis_decisions, redis_errors;
    std::atomic<std::uint64_t> redis_commands{0}, redis_writes{0}, redis_reconnects{0},
        redis_noscript{0},
        redis_timeouts{0},             ///< published from the connection by the loop's ticker
        cluster_redirects{0},          ///< MOVED and ASK followed (Redis Cluster)
        cluster_split_chains{0},       ///< requests whose chain spans slots
        cluster_refunds{0},            ///< refund calls of rejected split chains
        cluster_refund_failures{0};    ///< refunds that failed
    std::atomic<int> redis_state{-1};  ///< -1 not configured, 0 connected, 1 degraded, 2 down
    std::atomic<std::int64_t> upstream_idle{0};
    std::atomic<std::int64_t> websocket_tunnels_open{0};  ///< upgraded connections open now
    counter websocket_tunnels;                            ///< upgraded connections opened

    /// Carries the counters of `old` (the previous config's metrics of this loop) into these, by
    /// route, limiter and upstream name, so counters of the process survive a reload (SPEC §5).
    /// Gauges are not carried. Runs on the loop's thread before the new runtime is installed.
    void carry_over(const loop_metrics& old, const config::config& old_cfg,
                    const config::config& new_cfg);

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
