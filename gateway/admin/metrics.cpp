#include "gateway/admin/metrics.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <type_traits>

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

void histogram::merge(const histogram& other, const histogram* base) {
    for (std::size_t i = 0; i < buckets_.size(); ++i)
        buckets_[i].add(other.buckets_[i].get() - (base ? base->buckets_[i].get() : 0));
    count_.add(other.count_.get() - (base ? base->count_.get() : 0));
    sum_us_.add(other.sum_us_.get() - (base ? base->sum_us_.get() : 0));
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

const char* to_string(request_protocol p) {
    switch (p) {
        case request_protocol::http1:
            return "http/1.1";
        case request_protocol::http2:
            return "h2";
        case request_protocol::count_:
            break;
    }
    return "?";
}

const char* to_string(reload_outcome o) {
    switch (o) {
        case reload_outcome::success:
            return "success";
        case reload_outcome::failure:
            return "failure";
        case reload_outcome::count_:
            break;
    }
    return "?";
}

namespace {

// --- Values: what one series holds, summed over the event loops' parts. ---

std::uint64_t value_of(const counter& c) {
    return c.get();
}
template <class T>
std::uint64_t value_of(const std::atomic<T>& a) {
    auto v = a.load(std::memory_order_relaxed);
    if constexpr (std::is_signed_v<T>) return static_cast<std::uint64_t>(std::max<T>(0, v));
    return static_cast<std::uint64_t>(v);
}

template <class T>
constexpr std::size_t value_labels = 0;
template <>
constexpr std::size_t value_labels<status_counters> = 1;
template <class E, class C>
constexpr std::size_t value_labels<by_enum<E, C>> = 1;

// Calls f(label value or "", leaf) for each series of the value type, its parts summed: a
// leaf is a count, or the parts themselves for a histogram.
template <class T, class F>
void series_of(const std::vector<const T*>& parts, F&& f) {
    if constexpr (std::is_same_v<T, histogram>) {
        f("", parts);
    } else if constexpr (std::is_same_v<T, status_counters>) {
        std::map<std::string, std::uint64_t> by_status;
        for (const auto* p : parts)
            p->for_each(
                [&](const std::string& status, std::uint64_t n) { by_status[status] += n; });
        for (const auto& [status, n] : by_status)
            f(status, n);
    } else if constexpr (value_labels<T> == 1) {  // by_enum
        using E = typename T::label_enum;
        for (std::size_t i = 0; i < static_cast<std::size_t>(E::count_); ++i) {
            std::uint64_t n = 0;
            for (const auto* p : parts)
                n += value_of((*p)[i]);
            f(to_string(static_cast<E>(i)), n);
        }
    } else {
        std::uint64_t n = 0;
        for (const auto* p : parts)
            n += value_of(*p);
        f("", n);
    }
}

nlohmann::json summed_buckets(const std::vector<const histogram*>& parts) {
    std::array<std::uint64_t, histogram::bounds.size() + 1> total{};
    for (const auto* h : parts) {
        auto b = h->buckets();
        for (std::size_t i = 0; i < total.size(); ++i)
            total[i] += b[i];
    }
    return nlohmann::json(total);
}

// The value's /stats JSON: a number, an object by label value, or a histogram's buckets.
template <class T>
nlohmann::json json_of(const std::vector<const T*>& parts) {
    if constexpr (std::is_same_v<T, histogram>) {
        return summed_buckets(parts);
    } else if constexpr (value_labels<T> == 1) {
        auto out = nlohmann::json::object();
        series_of(parts, [&](const std::string& label, std::uint64_t n) { out[label] = n; });
        return out;
    } else {
        std::uint64_t total = 0;
        series_of(parts, [&](const std::string&, std::uint64_t n) { total = n; });
        return total;
    }
}

// Adds `from`'s values to `to`, less `base`'s when given (a copy merged from `from` earlier).
void merge_value(counter& to, const counter& from, const counter* base) {
    to.add(from.get() - (base ? base->get() : 0));
}
void merge_value(histogram& to, const histogram& from, const histogram* base) {
    to.merge(from, base);
}
void merge_value(status_counters& to, const status_counters& from, const status_counters* base) {
    to.merge(from, base);
}
// A gauge's level or a published total (carried or viewed, never folded: no base).
template <class T>
void merge_value(std::atomic<T>& to, const std::atomic<T>& from, const std::atomic<T>*) {
    to.store(to.load(std::memory_order_relaxed) + from.load(std::memory_order_relaxed),
             std::memory_order_relaxed);
}
template <class E, class C>
void merge_value(by_enum<E, C>& to, const by_enum<E, C>& from, const by_enum<E, C>* base) {
    for (std::size_t i = 0; i < to.size(); ++i)
        merge_value(to[i], from[i], base ? &(*base)[i] : nullptr);
}

// --- Shapes: the series' outer label (route, upstream, limiter) and where each part is. ---

template <class S>
struct shape_traits;
template <class T>
struct shape_traits<one<T>> {
    using value = T;
    static constexpr std::size_t outer_labels = 0;
    static constexpr const char* group = "";
    static std::size_t size(const config::config&) { return 1; }
    static const T* at(const one<T>& s, std::size_t) { return &s; }
    static std::string name(const config::config&, std::size_t, bool) { return {}; }
};
template <class T>
struct shape_traits<per_route<T>> {
    using value = T;
    static constexpr std::size_t outer_labels = 1;
    static constexpr const char* group = "routes";
    static std::size_t size(const config::config& cfg) { return cfg.routes.size() + 1; }
    static const T* at(const per_route<T>& s, std::size_t i) {
        return i < s.size() ? s.get(i) : nullptr;
    }
    // The last slot counts requests that matched no route.
    static std::string name(const config::config& cfg, std::size_t i, bool for_stats) {
        return i < cfg.routes.size() ? cfg.routes[i].name : for_stats ? "(no route)" : "";
    }
};
template <class T, const char* Group>
struct by_name_shape {
    using value = T;
    static constexpr std::size_t outer_labels = 1;
    static constexpr const char* group = Group;
    static const T* at(const std::vector<T>& s, std::size_t i) {
        return i < s.size() ? &s[i] : nullptr;
    }
};
constexpr char upstreams_group[] = "upstreams";
constexpr char limiters_group[] = "limiters";
template <class T>
struct shape_traits<per_upstream<T>> : by_name_shape<T, upstreams_group> {
    static std::size_t size(const config::config& cfg) { return cfg.upstreams.size(); }
    static std::string name(const config::config& cfg, std::size_t i, bool) {
        return std::next(cfg.upstreams.begin(), static_cast<std::ptrdiff_t>(i))->first;
    }
};
template <class T>
struct shape_traits<per_limiter<T>> : by_name_shape<T, limiters_group> {
    static std::size_t size(const config::config& cfg) { return cfg.limiters.size(); }
    static std::string name(const config::config& cfg, std::size_t i, bool) {
        return std::next(cfg.limiters.begin(), static_cast<std::ptrdiff_t>(i))->first;
    }
};

constexpr std::size_t count_labels(std::string_view labels) {
    if (labels.empty()) return 0;
    std::size_t n = 1;
    for (char c : labels)
        n += c == ',';
    return n;
}

// Calls f(info, &owner::member, carried) for every metric of RATEGATE_METRICS, in declaration
// order; `carried` is a std::bool_constant. The declared labels must be the shape's and the
// value's.
template <class F>
void for_each_metric(F&& f) {
#define RATEGATE_VISIT(where, member, shape, value, kind, name, labels, carried, stats, help)   \
    static_assert(                                                                              \
        count_labels(labels) == shape_traits<shape<value>>::outer_labels + value_labels<value>, \
        "metric " name ": its labels are not its shape's and value's");                         \
    static_assert(!(carried) || metric_kind::kind != metric_kind::gauge,                        \
                  "metric " name ": a gauge is not carried over a reload");                     \
    f(metric_info{#member, metric_kind::kind, name, labels, carried, stats, help},              \
      &where##_metrics::member, std::bool_constant<carried>{});
    RATEGATE_METRICS(RATEGATE_VISIT)
#undef RATEGATE_VISIT
}

// Calls f(index, parts) for each position of the shape in `cfg`, with the parts of the loops
// (or the process) that hold a value there.
template <class S, class F>
void for_each_position(const config::config& cfg, const std::vector<const S*>& storages, F&& f) {
    using V = typename shape_traits<S>::value;
    for (std::size_t i = 0; i < shape_traits<S>::size(cfg); ++i) {
        std::vector<const V*> parts;
        for (const auto* s : storages)
            if (const auto* v = shape_traits<S>::at(*s, i)) parts.push_back(v);
        f(i, parts);
    }
}

template <class M>
struct member_of;
template <class S, class O>
struct member_of<S O::*> {
    using owner = O;
};
template <class M>
using owner_of = typename member_of<M>::owner;

// The storages of one metric: the process's, or every loop's.
template <class S>
std::vector<const S*> storages_of(S process_metrics::*m, const process_metrics& process,
                                  const std::vector<const loop_metrics*>&) {
    return {&(process.*m)};
}
template <class S>
std::vector<const S*> storages_of(S loop_metrics::*m, const process_metrics&,
                                  const std::vector<const loop_metrics*>& loops) {
    std::vector<const S*> out;
    for (const auto* l : loops)
        out.push_back(&(l->*m));
    return out;
}

// Every series of one metric: f(label values, leaf), in exposition order.
template <class S, class F>
void for_each_series(const metric_info& info, const config::config& cfg,
                     const std::vector<const S*>& storages, F&& f) {
    using V = typename shape_traits<S>::value;
    for_each_position(cfg, storages, [&](std::size_t i, const std::vector<const V*>& parts) {
        std::vector<std::string> values;
        if (shape_traits<S>::outer_labels) values.push_back(shape_traits<S>::name(cfg, i, false));
        series_of(parts, [&](const std::string& inner, const auto& leaf) {
            auto all = values;
            if (value_labels<V>) all.push_back(inner);
            f(all, leaf);
        });
    });
}

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

// `route="a",status="200"`: the declared label names with these values.
std::string label_pairs(std::string_view names, const std::vector<std::string>& values) {
    std::string out;
    for (const auto& v : values) {
        auto comma = names.find(',');
        if (!out.empty()) out += ',';
        out += std::string(names.substr(0, comma)) + "=\"" + label(v) + "\"";
        names = comma == std::string_view::npos ? std::string_view() : names.substr(comma + 1);
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

const char* type_name(metric_kind k) {
    switch (k) {
        case metric_kind::counter:
            return "counter";
        case metric_kind::gauge:
            return "gauge";
        case metric_kind::histogram:
            return "histogram";
    }
    return "untyped";
}

// Carries one metric's values (less `base`'s, when given: `from`'s shape) from the old config's
// positions to the new one's by name.
template <class S>
void carry(S& to, const S& from, const S* base,
           const std::vector<std::optional<std::size_t>>& source) {
    using V = typename shape_traits<S>::value;
    for (std::size_t i = 0; i < source.size(); ++i) {
        if (!source[i]) continue;
        if constexpr (std::is_base_of_v<lazy_slots<V>, S>) {
            const V* b = base ? base->get(*source[i]) : nullptr;
            if (const auto* v = from.get(*source[i])) merge_value(to.at(i), *v, b);
        } else {
            const V* b = base ? &(*base)[*source[i]] : nullptr;
            merge_value(to[i], from[*source[i]], b);
        }
    }
}
template <class T>
void carry(one<T>& to, const one<T>& from, const one<T>* base,
           const std::vector<std::optional<std::size_t>>&) {
    const T* b = base;
    merge_value(to, from, b);
}

// For each new position, the old position of the same name (if any).
template <class Names>
std::vector<std::optional<std::size_t>> positions_by_name(const Names& old_names,
                                                          const Names& new_names) {
    std::vector<std::optional<std::size_t>> out;
    for (const auto& n : new_names) {
        auto it = std::find(old_names.begin(), old_names.end(), n);
        out.push_back(it == old_names.end() ? std::nullopt
                                            : std::optional<std::size_t>(static_cast<std::size_t>(
                                                  it - old_names.begin())));
    }
    return out;
}

std::vector<std::string> route_names(const config::config& c) {
    std::vector<std::string> out;
    for (const auto& r : c.routes)
        out.push_back(r.name);
    return out;
}
template <class Map>
std::vector<std::string> keys(const Map& m) {
    std::vector<std::string> out;
    for (const auto& [k, v] : m)
        out.push_back(k);
    return out;
}

// Adds the loop metrics of `from` (`old_cfg`'s shape; less `base`'s when given) into `to`
// (`new_cfg`'s) by name: the counters declared carried; without a base, the Redis totals too
// (the connections' totals, which outlive runtimes: a reload's metrics start from what was
// stored, not 0, until the loop stores them again) and with `every`, all the rest.
void add_by_name(loop_metrics& to, const loop_metrics& from, const loop_metrics* base,
                 const config::config& old_cfg, const config::config& new_cfg, bool every) {
    auto routes = positions_by_name(route_names(old_cfg), route_names(new_cfg));
    routes.push_back(old_cfg.routes.size());  // "no route" is the slot after the last route
    auto limiters = positions_by_name(keys(old_cfg.limiters), keys(new_cfg.limiters));
    auto upstreams = positions_by_name(keys(old_cfg.upstreams), keys(new_cfg.upstreams));
    for_each_metric([&](const metric_info&, auto member, auto carried) {
        if constexpr (std::is_same_v<owner_of<decltype(member)>, loop_metrics>) {
            using S = std::remove_cvref_t<decltype(from.*member)>;
            constexpr bool total = std::is_same_v<typename shape_traits<S>::value, published_total>;
            if (!carried && (base || !(total || every))) return;
            std::string_view group = shape_traits<S>::group;
            carry(to.*member, from.*member, base ? &(base->*member) : nullptr,
                  group == "routes"     ? routes
                  : group == "limiters" ? limiters
                                        : upstreams);
        }
    });
}

}  // namespace

void loop_metrics::carry_over(const loop_metrics& old, const config::config& old_cfg,
                              const config::config& new_cfg, carry_mode mode) {
    add_by_name(*this, old, nullptr, old_cfg, new_cfg, mode == carry_mode::view);
    // Until the loop publishes again, readiness stays what it was (not "never checked").
    redis_state.store(old.redis_state.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void loop_metrics::fold_since(const loop_metrics& old, const loop_metrics& base,
                              const config::config& old_cfg, const config::config& new_cfg) {
    add_by_name(*this, old, &base, old_cfg, new_cfg, false);
}

std::string render_metrics(const config::config& cfg, const process_metrics& process,
                           const std::vector<const loop_metrics*>& loops) {
    std::string out;
    out.reserve(16384);
    for_each_metric([&](const metric_info& info, auto member, auto) {
        std::string name = info.name;
        out += "# HELP " + name + " " + info.help + "\n# TYPE " + name + " " +
               type_name(info.kind) + "\n";
        for_each_series(
            info, cfg, storages_of(member, process, loops),
            [&](const std::vector<std::string>& labels, const auto& leaf) {
                auto pairs = label_pairs(info.labels, labels);
                if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, std::uint64_t>) {
                    out += name + (pairs.empty() ? "" : "{" + pairs + "}") + " " +
                           std::to_string(leaf) + "\n";
                } else {
                    render_histogram(out, name, pairs, leaf);
                }
            });
    });
    return out;
}

std::string render_stats_json(const config::config& cfg, const process_metrics& process,
                              const std::vector<const loop_metrics*>& loops, double uptime_s) {
    using nlohmann::json;
    json out;
    out["time_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    out["uptime_s"] = uptime_s;
    out["latency_bounds"] = histogram::bounds;
    // Rows of per-route and per-limiter metrics: "no route" is shown only once seen.
    std::map<std::string, std::vector<json>> rows;
    std::map<std::string, std::vector<bool>> seen;
    for_each_metric([&](const metric_info& info, auto member, auto) {
        std::string_view at = info.stats;
        if (at.empty()) return;
        auto storages = storages_of(member, process, loops);
        using S =
            std::remove_const_t<std::remove_pointer_t<typename decltype(storages)::value_type>>;
        auto slash = at.find('/');
        if constexpr (shape_traits<S>::outer_labels == 0) {
            json* node = &out;
            for (; slash != std::string_view::npos; slash = at.find('/')) {
                node = &(*node)[std::string(at.substr(0, slash))];
                at.remove_prefix(slash + 1);
            }
            for_each_position(cfg, storages, [&](std::size_t, const auto& parts) {
                (*node)[std::string(at)] = json_of(parts);
            });
        } else {
            std::string group(at.substr(0, slash)), field(at.substr(slash + 1));
            if (group != shape_traits<S>::group)
                throw std::logic_error(std::string("metric ") + info.name + ": /stats path " +
                                       info.stats + " is not in its shape's rows");
            auto& r = rows[group];
            auto& s = seen[group];
            for_each_position(cfg, storages, [&](std::size_t i, const auto& parts) {
                if (r.size() <= i) {
                    r.resize(i + 1);
                    s.resize(i + 1);
                }
                r[i]["name"] = shape_traits<S>::name(cfg, i, true);
                r[i][field] = json_of(parts);
                if (!parts.empty()) s[i] = true;
            });
        }
    });
    for (auto& [group, r] : rows) {
        auto& arr = out[group] = json::array();
        for (std::size_t i = 0; i < r.size(); ++i) {
            bool no_route = group == "routes" && i == cfg.routes.size();
            if (!no_route || seen[group][i]) arr.push_back(std::move(r[i]));
        }
    }
    int state = -1;
    for (const auto* l : loops)
        state = std::max(state, l->redis_state.load(std::memory_order_relaxed));
    static constexpr const char* states[] = {"connected", "degraded", "down"};
    out["redis"]["configured"] = cfg.redis.has_value();
    out["redis"]["state"] =
        cfg.redis ? (state >= 0 && state <= 2 ? states[state] : "starting") : "not configured";
    return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string render_summary(const config::config& cfg, const loop_metrics& m) {
    process_metrics none;
    std::vector<const loop_metrics*> loops{&m};
    // {member} or {member.label}: that metric's total, over the series with that label value.
    auto total = [&](std::string_view ref) {
        auto dot = ref.find('.');
        auto member = ref.substr(0, dot);
        auto want = dot == std::string_view::npos ? std::string_view() : ref.substr(dot + 1);
        std::optional<std::uint64_t> sum;
        for_each_metric([&](const metric_info& info, auto ptr, auto) {
            if (member != info.member) return;
            sum = 0;
            for_each_series(
                info, cfg, storages_of(ptr, none, loops),
                [&](const std::vector<std::string>& labels, const auto& leaf) {
                    if (!want.empty() &&
                        std::find(labels.begin(), labels.end(), want) == labels.end())
                        return;
                    if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, std::uint64_t>)
                        *sum += leaf;
                    else
                        for (const auto* h : leaf)
                            *sum += h->count();
                });
        });
        if (!sum)
            throw std::logic_error("summary_format names no declared metric: " + std::string(ref));
        return *sum;
    };
    std::string out;
    std::string_view f = summary_format;
    for (auto open = f.find('{'); open != std::string_view::npos; open = f.find('{')) {
        auto close = f.find('}', open);
        out += f.substr(0, open);
        out += std::to_string(total(f.substr(open + 1, close - open - 1)));
        f.remove_prefix(close + 1);
    }
    out += f;
    return out;
}

}  // namespace rategate::gateway
