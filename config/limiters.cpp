// SPEC §2 `limiters.NAME`: scope, algorithm, rules and the optional fields.
#include "config/sections.hpp"

#include <set>

namespace rategate::config {

const char* to_string(algorithm a) {
    switch (a) {
        case algorithm::fixed_window:
            return "fixed_window";
        case algorithm::sliding_window_log:
            return "sliding_window_log";
        case algorithm::sliding_window_counter:
            return "sliding_window_counter";
        case algorithm::leaky_bucket:
            return "leaky_bucket";
        case algorithm::token_bucket:
            return "token_bucket";
        case algorithm::gcra:
            return "gcra";
        case algorithm::smooth_bursty:
            return "smooth_bursty";
        case algorithm::smooth_warming_up:
            return "smooth_warming_up";
    }
    return "?";
}

namespace detail {

namespace {

// Which rule fields each algorithm takes (SPEC §2 table).
std::set<std::string> rule_fields(algorithm a) {
    switch (a) {
        case algorithm::fixed_window:
        case algorithm::sliding_window_log:
            return {"limit", "window"};
        case algorithm::sliding_window_counter:
            return {"limit", "window", "buckets"};
        case algorithm::leaky_bucket:
            return {"rate", "period", "capacity"};
        case algorithm::token_bucket:
        case algorithm::gcra:
            return {"rate", "period", "burst"};
        case algorithm::smooth_bursty:
            return {"rate", "max_burst_seconds", "idle_ttl"};
        case algorithm::smooth_warming_up:
            return {"rate", "warmup_period", "cold_factor"};
    }
    return {};
}

void read_rule(const json& j, const std::string& path, checker& c, algorithm a, rule_config& r) {
    object_reader o(j, path, c);
    auto fields = rule_fields(a);
    // SPEC §2: a rule field without a default in the table is required, for every algorithm.
    static const std::set<std::string> with_default{"buckets", "max_burst_seconds", "idle_ttl",
                                                    "cold_factor"};
    auto want = [&](const char* key) -> const json* {
        if (!fields.count(key)) return nullptr;
        return o.get(key, !with_default.count(key));
    };
    if (auto v = read_int(want("limit"), o.path("limit"), c, 1, 1'000'000'000'000)) r.limit = *v;
    if (auto v = read_duration(want("window"), o.path("window"), c)) r.window = *v;
    if (auto v = read_int(want("buckets"), o.path("buckets"), c, 1, 3600))
        r.buckets = static_cast<int>(*v);
    if (auto v = read_positive(want("rate"), o.path("rate"), c)) r.rate = *v;
    if (auto v = read_duration(want("period"), o.path("period"), c)) r.period = *v;
    if (auto v = read_positive(want("burst"), o.path("burst"), c, 1, true)) r.burst = *v;
    if (auto v = read_positive(want("capacity"), o.path("capacity"), c)) r.capacity = *v;
    if (auto v = read_positive(want("max_burst_seconds"), o.path("max_burst_seconds"), c))
        r.max_burst_seconds = *v;
    if (auto v = read_duration(want("idle_ttl"), o.path("idle_ttl"), c)) r.idle_ttl = *v;
    if (auto v = read_duration(want("warmup_period"), o.path("warmup_period"), c))
        r.warmup_period = *v;
    if (auto v = read_positive(want("cold_factor"), o.path("cold_factor"), c, 1, true))
        r.cold_factor = *v;
    if (a == algorithm::sliding_window_counter && r.window.count() > 0 &&
        r.window.count() % r.buckets != 0)
        c.fail(o.path("buckets"), "window must divide into " + std::to_string(r.buckets) +
                                      " sub-windows of whole microseconds");
    o.finish();
}

}  // namespace

void read_limiter(const json& j, const std::string& path, checker& c, limiter_config& l) {
    object_reader o(j, path, c);
    if (auto s = read_string(o.get("scope", true), o.path("scope"), c)) {
        if (*s == "global")
            l.scope = scope_kind::global;
        else if (*s == "route")
            l.scope = scope_kind::route;
        else if (*s == "user")
            l.scope = scope_kind::user;
        else if (*s == "ip")
            l.scope = scope_kind::ip;
        else if (s->rfind("header:", 0) == 0 && is_token(s->substr(7))) {
            l.scope = scope_kind::header;
            l.scope_header = s->substr(7);
        } else
            c.fail(o.path("scope"),
                   "unknown scope \"" + *s +
                       "\" (expected \"global\", \"route\", \"user\", \"ip\" or \"header:NAME\")");
    }
    auto algo = read_enum<algorithm>(o.get("algorithm", true), o.path("algorithm"), c,
                                     {{"fixed_window", algorithm::fixed_window},
                                      {"sliding_window_log", algorithm::sliding_window_log},
                                      {"sliding_window_counter", algorithm::sliding_window_counter},
                                      {"leaky_bucket", algorithm::leaky_bucket},
                                      {"token_bucket", algorithm::token_bucket},
                                      {"gcra", algorithm::gcra},
                                      {"smooth_bursty", algorithm::smooth_bursty},
                                      {"smooth_warming_up", algorithm::smooth_warming_up}});
    auto rules_path = o.path("rules");
    const json* rules = o.get("rules", true);
    if (algo) {
        l.algo = *algo;
        if (rules) {
            if (!rules->is_array() || rules->empty()) {
                c.fail(rules_path, "expected a non-empty array of rules");
            } else {
                for (std::size_t i = 0; i < rules->size(); ++i) {
                    rule_config r;
                    read_rule((*rules)[i], element(rules_path, i), c, *algo, r);
                    l.rules.push_back(r);
                }
            }
        }
    }
    if (auto m = read_enum<bool>(o.get("mode"), o.path("mode"), c,
                                 {{"enforce", false}, {"shadow", true}}))
        l.shadow = *m;
    if (auto d = read_duration(o.get("delay"), o.path("delay"), c)) l.delay = *d;
    if (auto m = read_enum<missing_key_policy>(o.get("on_missing_key"), o.path("on_missing_key"), c,
                                               {{"skip", missing_key_policy::skip},
                                                {"deny", missing_key_policy::deny},
                                                {"anonymous", missing_key_policy::anonymous}}))
        l.on_missing_key = *m;
    if (auto* p = o.get("ipv6_prefix")) {
        if (l.scope != scope_kind::ip)
            c.fail(o.path("ipv6_prefix"), "only applies to scope \"ip\"");
        else if (auto v = read_int(p, o.path("ipv6_prefix"), c, 1, 128))
            l.ipv6_prefix = static_cast<int>(*v);
    }
    if (auto* p = o.get("ipv4_prefix")) {
        if (l.scope != scope_kind::ip)
            c.fail(o.path("ipv4_prefix"), "only applies to scope \"ip\"");
        else if (auto v = read_int(p, o.path("ipv4_prefix"), c, 0, 32))
            l.ipv4_prefix = static_cast<int>(*v);
    }
    if (auto* p = o.get("per_route")) {
        if (l.scope != scope_kind::user && l.scope != scope_kind::ip)
            c.fail(o.path("per_route"), "only applies to scopes \"user\" and \"ip\"");
        else if (auto v = read_bool(p, o.path("per_route"), c))
            l.per_route = *v;
    }
    if (auto v = read_bool(o.get("cache"), o.path("cache"), c)) l.cache = *v;
    o.finish();
}

// The most one request may cost on an enforced layer's rule, or nullopt when any cost can pass
// (smooth_*: Guava admits one acquire of any size and makes the next request pay for it).
std::optional<std::pair<double, const char*>> rule_capacity(algorithm a, const rule_config& r) {
    switch (a) {
        case algorithm::fixed_window:
        case algorithm::sliding_window_log:
        case algorithm::sliding_window_counter:
            return std::pair{static_cast<double>(r.limit), "limit"};
        case algorithm::leaky_bucket:
            return std::pair{r.capacity, "capacity"};
        case algorithm::token_bucket:
        case algorithm::gcra:
            return std::pair{r.burst, "burst"};
        case algorithm::smooth_bursty:
        case algorithm::smooth_warming_up:
            return std::nullopt;
    }
    return std::nullopt;
}

}  // namespace detail

}  // namespace rategate::config
