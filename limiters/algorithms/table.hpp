// One table of algorithm facts (SPEC §2 "Limiters"): one row per algorithm with its config
// name, its rule fields (defaults and bounds), its Lua code and parameter order, how a rule caps
// one request's cost, what the rate-limit headers say, whether it reserves in delay mode, its
// refund and the retry bound of the over-limit cache. Everything that used to `switch` on the
// algorithm reads this row; only the decision itself (algorithms.cpp, evaluate) dispatches by
// a switch, to keep the hot path a direct call.
//
// Header-only constant data: config/limiters.cpp validates rules from it, so it includes
// nothing from limiters/ (only config/config.hpp) and links to nothing.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "config/config.hpp"

namespace rategate::limiters {

/// A rule as four numbers, in the order the Lua chain script receives them: the row's fields in
/// order (durations in µs), unused slots 0 (limiters/redis/chain_codec.cpp sends them as they
/// are; limiters/keys.cpp hashes them into the key's shape_tag).
using rule_params = std::array<double, 4>;

/// How a rule field is written in the config (SPEC §2): an integer, a duration ("250ms" or
/// integer ms, never 0) or a number.
enum class field_kind { integer, duration, number };

/// One rule field: its JSON key, kind, bounds and default, and where config::rule_config keeps
/// it. Bounds: an integer lies in [int_min, int_max]; a number is > num_min (>= with
/// num_min_inclusive) and finite; a duration is > 0.
struct rule_field {
    const char* key;
    field_kind kind;
    std::int64_t int_min = 0, int_max = 0;
    double num_min = 0;
    bool num_min_inclusive = false;
    /// None: the field is required (SPEC §2: "a rule field without a default is required").
    /// Integers and numbers as they are, durations in µs.
    std::optional<double> default_value{};
    /// Stores a value: integers and durations (µs) come as `whole`, numbers as `number`.
    void (*store)(config::rule_config& r, std::int64_t whole, double number) = nullptr;
    /// The field's value as the Lua script receives it (durations in µs).
    double (*param)(const config::rule_config& r) = nullptr;
};

namespace rule_fields {

using config::rule_config;
inline double us(config::micros d) {
    return static_cast<double>(d.count());
}

inline constexpr rule_field limit{
    .key = "limit",
    .kind = field_kind::integer,
    .int_min = 1,
    .int_max = 1'000'000'000'000,
    .store = [](rule_config& r, std::int64_t v, double) { r.limit = v; },
    .param = [](const rule_config& r) { return static_cast<double>(r.limit); }};
inline constexpr rule_field window{
    .key = "window",
    .kind = field_kind::duration,
    .store = [](rule_config& r, std::int64_t v, double) { r.window = config::micros(v); },
    .param = [](const rule_config& r) { return us(r.window); }};
inline constexpr rule_field buckets{
    .key = "buckets",
    .kind = field_kind::integer,
    .int_min = 1,
    .int_max = 3600,
    .default_value = 10,
    .store = [](rule_config& r, std::int64_t v, double) { r.buckets = static_cast<int>(v); },
    .param = [](const rule_config& r) { return static_cast<double>(r.buckets); }};
inline constexpr rule_field rate{
    .key = "rate",
    .kind = field_kind::number,
    .store = [](rule_config& r, std::int64_t, double v) { r.rate = v; },
    .param = [](const rule_config& r) { return r.rate; }};
inline constexpr rule_field period{
    .key = "period",
    .kind = field_kind::duration,
    .store = [](rule_config& r, std::int64_t v, double) { r.period = config::micros(v); },
    .param = [](const rule_config& r) { return us(r.period); }};
inline constexpr rule_field burst{
    .key = "burst",
    .kind = field_kind::number,
    .num_min = 1,
    .num_min_inclusive = true,
    .store = [](rule_config& r, std::int64_t, double v) { r.burst = v; },
    .param = [](const rule_config& r) { return r.burst; }};
inline constexpr rule_field capacity{
    .key = "capacity",
    .kind = field_kind::number,
    .store = [](rule_config& r, std::int64_t, double v) { r.capacity = v; },
    .param = [](const rule_config& r) { return r.capacity; }};
inline constexpr rule_field max_burst_seconds{
    .key = "max_burst_seconds",
    .kind = field_kind::number,
    .default_value = 1.0,
    .store = [](rule_config& r, std::int64_t, double v) { r.max_burst_seconds = v; },
    .param = [](const rule_config& r) { return r.max_burst_seconds; }};
inline constexpr rule_field idle_ttl{
    .key = "idle_ttl",
    .kind = field_kind::duration,
    .default_value = 60'000'000,
    .store = [](rule_config& r, std::int64_t v, double) { r.idle_ttl = config::micros(v); },
    .param = [](const rule_config& r) { return us(r.idle_ttl); }};
inline constexpr rule_field warmup_period{
    .key = "warmup_period",
    .kind = field_kind::duration,
    .store = [](rule_config& r, std::int64_t v, double) { r.warmup_period = config::micros(v); },
    .param = [](const rule_config& r) { return us(r.warmup_period); }};
inline constexpr rule_field cold_factor{
    .key = "cold_factor",
    .kind = field_kind::number,
    .num_min = 1,
    .num_min_inclusive = true,
    .default_value = 3.0,
    .store = [](rule_config& r, std::int64_t, double v) { r.cold_factor = v; },
    .param = [](const rule_config& r) { return r.cold_factor; }};

}  // namespace rule_fields

/// A rule's own check beyond its fields' bounds: the field to blame and the message, if any.
using rule_check =
    std::optional<std::pair<const char*, std::string>> (*)(const config::rule_config&);

/// Everything rategate knows about one algorithm, outside its decision (the C++ twin in
/// limiters/algorithms/<name>.cpp, the Lua twin in limiters/<lua>).
struct algorithm_row {
    config::algorithm algo;
    const char* name;  ///< as the config writes it
    int code;          ///< the chain script's A[code] and SIZE[code], refund.lua's R[code]
    const char* lua;   ///< the Lua twin, relative to limiters/
    /// The rule fields in the config's reading order, which is also the order of the four
    /// parameters the Lua script receives (nullptr: unused).
    std::array<const rule_field*, 3> fields;
    const char* state;  ///< what one rule stores (doubles), or the log
    /// Index in `fields` of the most one request may cost on a rule (permits), checked against
    /// every route's cost at load; -1: any cost can pass (Guava admits one acquire of any size
    /// and makes the next request pay for it).
    int capacity_field;
    /// In delay mode an admission may come with a wait (a reservation, a debt in the state);
    /// the window algorithms cannot reserve and say when to decide again instead.
    bool reservable;
    /// What the RateLimit headers say about a rule: q (permits) and w (seconds).
    double (*header_quota)(const rule_params& p);
    double (*header_window_s)(const rule_params& p);
    /// An upper bound (µs) on the retry a rule without delay gives a request of `cost`, whatever
    /// its state (`max_cost`: the largest cost any route sends the layer); +inf: none proven.
    double (*retry_bound_us)(const rule_params& p, double cost, double max_cost);
    /// The Redis Cluster refund (limiters/lua/refund/refund.lua R[code]); "" for none.
    const char* refund;
    /// A check of the whole rule after its fields are read (nullptr: none).
    rule_check check = nullptr;
    /// The longest time (µs) a rule's state can matter, or its retry or reset reach, after a
    /// request of `cost` permits (the layer's delay aside): the time to refill or drain the
    /// rule and to pay for `cost`. nullptr: the window algorithms, bounded by their window (a
    /// duration, at most max_span_us). The config refuses a rule or a route cost past
    /// max_span_us.
    double (*span_us)(const rule_params& p, double cost) = nullptr;
    /// What span_us computes, for the config error.
    const char* span = "";
    /// The version of the state's layout, 0 for the first: hashed into the key's shape
    /// (limiters/keys.hpp shape_tag) when not 0, so that a state stored in an older layout is
    /// never read as the new one (a new key instead, as after a rule change).
    int layout = 0;
    /// The most permits a rule's state can hold (burst, capacity, Guava's stored permits at
    /// most); nullptr: the window algorithms, whose limit field is at most 1e12. The config
    /// refuses a rule past max_permits, at `holds_field`.
    double (*holds)(const rule_params& p) = nullptr;
    const char* holds_field = "";
};

/// The most permits a rule may hold (algorithm_row::holds): the window algorithms' largest
/// limit. Past 2^53 a double no longer counts whole permits (burst 1e17 minus a cost of 1 is
/// 1e17 again: a bucket that never empties), and past 9.2e18 the Redis reply turns the
/// remaining permits into 0 while the in-process twin reports them.
inline constexpr double max_permits = 1e12;

/// The longest span (µs) a rule may have (algorithm_row::span_us): the longest duration the
/// config accepts (about 31.7 years). It keeps every time the twins compute (now + span, with
/// the delay) below 2^53 µs, where doubles hold whole µs, and every TTL within what Redis' SET
/// PX takes from the chain script (a Lua number past 1e17 ms is sent as "1e+17", which Redis
/// refuses: the script fails on every admission) and every retry within what the reply
/// decodes (chain_codec's reply_number turns |v| >= 9.2e18 µs into 0).
inline constexpr double max_span_us = 1e15;

namespace table_detail {

inline double seconds(double us) {
    return us / 1e6;
}
inline double window_quota(const rule_params& p) {
    return p[0];
}
inline double window_width_s(const rule_params& p) {
    return seconds(p[1]);
}
inline double bucket_quota(const rule_params& p) {
    return p[2];
}
inline double bucket_period_s(const rule_params& p) {
    return seconds(p[1]);
}
// start + window - t (t >= start); entry + window - t (entry <= t); (j + n) * width - t.
inline double one_window(const rule_params& p, double, double) {
    return p[1];
}
// tokens >= 0: ceil((cost - tokens) * period / rate); level <= capacity: likewise.
inline double earn_cost(const rule_params& p, double cost, double) {
    return std::ceil(cost * p[1] / p[0]);
}
inline constexpr double unbounded = std::numeric_limits<double>::infinity();

}  // namespace table_detail

// clang-format off
/// The table, in config::algorithm order (algorithm_facts() indexes it).
inline constexpr std::array<algorithm_row, 8> algorithm_table{{
    {.algo = config::algorithm::fixed_window, .name = "fixed_window", .code = 1,
     .lua = "lua/10_fixed_window.lua",
     .fields = {&rule_fields::limit, &rule_fields::window},
     .state = "window start (µs), count",
     .capacity_field = 0, .reservable = false,
     .header_quota = table_detail::window_quota, .header_window_s = table_detail::window_width_s,
     .retry_bound_us = table_detail::one_window,
     .refund = "the cost off the count, while the stored window is the one it was counted in"},
    {.algo = config::algorithm::sliding_window_log, .name = "sliding_window_log", .code = 2,
     .lua = "lua/20_sliding_window_log.lua",
     .fields = {&rule_fields::limit, &rule_fields::window},
     .state = "log of (time µs, permits), one ZSET entry per admitted request",
     .capacity_field = 0, .reservable = false,
     .header_quota = table_detail::window_quota, .header_window_s = table_detail::window_width_s,
     .retry_bound_us = table_detail::one_window,
     .refund = "removes the oldest entry of the cost's permits from the consuming time on"},
    {.algo = config::algorithm::sliding_window_counter, .name = "sliding_window_counter",
     .code = 3, .lua = "lua/30_sliding_window_counter.lua",
     .fields = {&rule_fields::limit, &rule_fields::window, &rule_fields::buckets},
     .state = "newest sub-window index, then one count per ring slot (buckets)",
     .capacity_field = 0, .reservable = false,
     .header_quota = table_detail::window_quota, .header_window_s = table_detail::window_width_s,
     .retry_bound_us = table_detail::one_window,
     .refund = "the cost off the sub-window slot it was counted in, while that slot is in the ring",
     .check = [](const config::rule_config& r) -> std::optional<std::pair<const char*, std::string>> {
         if (r.window.count() > 0 && r.window.count() % r.buckets != 0)
             return std::pair{"buckets", "window must divide into " + std::to_string(r.buckets) +
                                             " sub-windows of whole microseconds"};
         return std::nullopt;
     }},
    {.algo = config::algorithm::leaky_bucket, .name = "leaky_bucket", .code = 4,
     .lua = "lua/40_leaky_bucket.lua",
     .fields = {&rule_fields::rate, &rule_fields::period, &rule_fields::capacity},
     .state = "level, last (µs)",
     .capacity_field = 2, .reservable = true,
     .header_quota = table_detail::bucket_quota, .header_window_s = table_detail::bucket_period_s,
     .retry_bound_us = table_detail::earn_cost,
     .refund = "the level down by the cost, while the last write is within cost x interval",
     .span_us = [](const rule_params& p, double cost) { return (p[2] + cost) * p[1] / p[0]; },
     .span = "(capacity + cost) x period / rate",
     .holds = table_detail::bucket_quota, .holds_field = "capacity"},
    {.algo = config::algorithm::token_bucket, .name = "token_bucket", .code = 5,
     .lua = "lua/50_token_bucket.lua",
     .fields = {&rule_fields::rate, &rule_fields::period, &rule_fields::burst},
     .state = "tokens, last (µs)",
     .capacity_field = 2, .reservable = true,
     .header_quota = table_detail::bucket_quota, .header_window_s = table_detail::bucket_period_s,
     .retry_bound_us = table_detail::earn_cost,
     .refund = "the cost back, capped at burst, while the last write is within cost x interval",
     .span_us = [](const rule_params& p, double cost) { return (p[2] + cost) * p[1] / p[0]; },
     .span = "(burst + cost) x period / rate",
     .holds = table_detail::bucket_quota, .holds_field = "burst"},
    {.algo = config::algorithm::gcra, .name = "gcra", .code = 6, .lua = "lua/60_gcra.lua",
     .fields = {&rule_fields::rate, &rule_fields::period, &rule_fields::burst},
     .state = "theoretical arrival time relative to last (µs), last (µs)",
     .capacity_field = 2, .reservable = true,
     .header_quota = table_detail::bucket_quota, .header_window_s = table_detail::bucket_period_s,
     // tat <= t + burst * interval: ceil(allow_at - t)
     .retry_bound_us = [](const rule_params& p, double cost, double) {
         return std::ceil(cost * (p[1] / p[0]));
     },
     .refund = "the TAT back by the cost's emission time, never before the consuming time",
     .span_us = [](const rule_params& p, double cost) { return (p[2] + cost) * p[1] / p[0]; },
     .span = "(burst + cost) x period / rate",
     // 1: the TAT relative to last (an absolute TAT lost sub-µs intervals to rounding).
     .layout = 1,
     .holds = table_detail::bucket_quota, .holds_field = "burst"},
    {.algo = config::algorithm::smooth_bursty, .name = "smooth_bursty", .code = 7,
     .lua = "lua/70_smooth_bursty.lua",
     .fields = {&rule_fields::rate, &rule_fields::max_burst_seconds, &rule_fields::idle_ttl},
     .state = "stored permits, next free ticket (µs), last (µs)",
     .capacity_field = -1, .reservable = true,
     .header_quota = [](const rule_params& p) { return std::max(1.0, std::floor(p[0] * p[1])); },
     .header_window_s = [](const rule_params& p) { return p[1]; },
     // next_free <= admitted + floor(max_cost * stable)
     .retry_bound_us = [](const rule_params& p, double cost, double max_cost) {
         return std::ceil(std::max(cost, max_cost) * (1e6 / p[0]));
     },
     .refund = "the next free ticket back by the cost's stable time, never before the consuming "
               "time; stored permits are not given back",
     .span_us = [](const rule_params& p, double cost) { return (p[1] + cost / p[0]) * 1e6; },
     .span = "(max_burst_seconds + cost / rate) (s)",
     .holds = [](const rule_params& p) { return p[0] * p[1]; },
     .holds_field = "max_burst_seconds"},
    {.algo = config::algorithm::smooth_warming_up, .name = "smooth_warming_up", .code = 8,
     .lua = "lua/80_smooth_warming_up.lua",
     .fields = {&rule_fields::rate, &rule_fields::warmup_period, &rule_fields::cold_factor},
     .state = "stored permits, next free ticket (µs), last (µs)",
     .capacity_field = -1, .reservable = true,
     .header_quota = [](const rule_params& p) { return std::max(1.0, std::floor(p[0])); },
     .header_window_s = [](const rule_params&) { return 1.0; },
     .retry_bound_us = [](const rule_params&, double, double) { return table_detail::unbounded; },
     .refund = "as smooth_bursty",
     .span_us = [](const rule_params& p, double cost) { return p[1] + cost * p[2] * 1e6 / p[0]; },
     .span = "warmup_period + cost x cold_factor / rate (s)",
     // max_permits of smooth_warming_up.cpp: threshold + 2 x warmup / (stable + cold).
     .holds = [](const rule_params& p) {
         double stable = 1e6 / p[0];
         return 0.5 * p[1] / stable + 2.0 * p[1] / (stable + stable * p[2]);
     },
     .holds_field = "warmup_period"},
}};
// clang-format on

/// The row of `a`.
constexpr const algorithm_row& algorithm_facts(config::algorithm a) {
    return algorithm_table[static_cast<std::size_t>(a)];
}

namespace table_detail {
/// Every field of `row` is set in `p` (a 0 is a field whose own error is reported).
inline bool fields_set(const algorithm_row& row, const rule_params& p) {
    for (std::size_t i = 0; i < row.fields.size(); ++i)
        if (row.fields[i] && !(p[i] > 0)) return false;
    return true;
}
/// `v` in three significant digits ("2e+21"), for errors.
inline std::string short_number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}
}  // namespace table_detail

/// Where rule `p` of `row` spans more than max_span_us for a request of `cost` permits: the
/// error's text; nullopt when it does not, or has no span, or a field is not set (0: its own
/// error is reported).
inline std::optional<std::string> span_problem(const algorithm_row& row, const rule_params& p,
                                               double cost) {
    if (!row.span_us || !table_detail::fields_set(row, p)) return std::nullopt;
    double span = row.span_us(p, cost);
    if (span <= max_span_us) return std::nullopt;
    return std::string(row.span) + " is " + table_detail::short_number(span) + " us at cost " +
           std::to_string(static_cast<long long>(cost)) + "; at most 1e15 us (about 31 years)";
}

/// Where rule `p` of `row` may hold more than max_permits: the field to blame and the error's
/// text; nullopt when it may not, or a field is not set (0: its own error is reported).
inline std::optional<std::pair<const char*, std::string>> holds_problem(const algorithm_row& row,
                                                                        const rule_params& p) {
    if (!row.holds || !table_detail::fields_set(row, p)) return std::nullopt;
    double most = row.holds(p);
    if (most <= max_permits) return std::nullopt;
    return std::pair{row.holds_field, "the rule holds up to " + table_detail::short_number(most) +
                                          " permits; at most 1e12 (a window's largest limit)"};
}

/// The row whose config name is `name`, or nullptr.
constexpr const algorithm_row* find_algorithm(std::string_view name) {
    for (const auto& row : algorithm_table)
        if (name == row.name) return &row;
    return nullptr;
}

/// The algorithm's code in the Lua scripts (the chain script's A[code], refund.lua's R[code]).
constexpr int algorithm_code(config::algorithm a) {
    return algorithm_facts(a).code;
}

/// The Lua parameters of rule `r` of algorithm `a`: its fields in the row's order.
inline rule_params to_params(config::algorithm a, const config::rule_config& r) {
    rule_params p{};
    const auto& row = algorithm_facts(a);
    for (std::size_t i = 0; i < row.fields.size() && row.fields[i]; ++i)
        p[i] = row.fields[i]->param(r);
    return p;
}

namespace table_detail {

constexpr bool rows_in_enum_order() {
    for (std::size_t i = 0; i < algorithm_table.size(); ++i)
        if (static_cast<std::size_t>(algorithm_table[i].algo) != i) return false;
    return true;
}
static_assert(rows_in_enum_order(), "algorithm_table rows must follow config::algorithm");
static_assert(static_cast<std::size_t>(config::algorithm::smooth_warming_up) + 1 ==
                  algorithm_table.size(),
              "one row per config::algorithm");

}  // namespace table_detail

}  // namespace rategate::limiters
