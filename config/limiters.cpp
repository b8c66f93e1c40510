// SPEC §2 `limiters.NAME`: scope, algorithm, rules and the optional fields.
#include "config/sections.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

// The one include of config/ from above: the algorithm table is header-only data that includes
// nothing from limiters/ but config.hpp (see README.md here).
#include "limiters/algorithms/table.hpp"

namespace rategate::config {

const char* to_string(algorithm a) {
    auto i = static_cast<std::size_t>(a);
    return i < limiters::algorithm_table.size() ? limiters::algorithm_table[i].name : "?";
}

namespace detail {

namespace {

using limiters::algorithm_row;
using limiters::field_kind;
using limiters::rule_field;

// The row's fields, in order (nullptr: an unused slot).
template <class F>
void for_each_field(const algorithm_row& a, F f) {
    for (const rule_field* field : a.fields)
        if (field) f(*field);
}

// A rule of algorithm `a`: its fields as the table describes them (SPEC §2 table), then the
// row's own check. Defaults go in first, so that the check sees them.
void read_rule(const json& j, const std::string& path, checker& c, const algorithm_row& a,
               rule_config& r) {
    object_reader o(j, path, c);
    for_each_field(a, [&](const rule_field& f) {
        if (f.default_value)
            f.store(r, static_cast<std::int64_t>(*f.default_value), *f.default_value);
    });
    for_each_field(a, [&](const rule_field& f) {
        // SPEC §2: a rule field without a default in the table is required, for every algorithm.
        const json* v = o.get(f.key, !f.default_value);
        auto at = o.path(f.key);
        switch (f.kind) {
            case field_kind::integer:
                if (auto x = read_int(v, at, c, f.int_min, f.int_max)) f.store(r, *x, 0);
                break;
            case field_kind::duration:
                if (auto x = read_duration(v, at, c)) f.store(r, x->count(), 0);
                break;
            case field_kind::number:
                if (auto x = read_positive(v, at, c, f.num_min, f.num_min_inclusive))
                    f.store(r, 0, *x);
                break;
        }
    });
    if (a.check)
        if (auto problem = a.check(r)) c.fail(o.path(problem->first), problem->second);
    // Times the twins compute must stay in range (limiters::max_span_us); the rate is the
    // field the span divides by. A route's cost is checked against it in routes.cpp.
    if (auto problem = limiters::span_problem(a, limiters::to_params(a.algo, r), 1))
        c.fail(o.path("rate"), *problem);
    // Permits must stay countable (limiters::max_permits).
    if (auto problem = limiters::holds_problem(a, limiters::to_params(a.algo, r)))
        c.fail(o.path(problem->first), problem->second);
    o.finish();
}

// The config names of the algorithms, table order.
const std::vector<std::pair<const char*, algorithm>>& algorithm_names() {
    static const auto names = [] {
        std::vector<std::pair<const char*, algorithm>> out;
        for (const auto& row : limiters::algorithm_table)
            out.emplace_back(row.name, row.algo);
        return out;
    }();
    return names;
}

// `"sync": {"lease": N}` (SPEC §2): every error is reported at `path`, the sync object itself.
void read_sync(const json& j, const std::string& path, checker& c, limiter_config& l) {
    object_reader o(j, path, c);
    const json* n = o.get("lease", true);
    o.finish();
    if (!n) return;
    if (l.algo != algorithm::token_bucket && l.algo != algorithm::fixed_window)
        return c.fail(path, "a lease applies to token_bucket and fixed_window only");
    if (l.scope != scope_kind::global && l.scope != scope_kind::route)
        return c.fail(path, "a lease applies to scopes \"global\" and \"route\" only");
    if (l.shadow) return c.fail(path, "a leased layer cannot be in shadow mode");
    if (l.delay) return c.fail(path, "a leased layer cannot have a delay");
    // N may not exceed the smallest burst or limit of the rules: a lease is what one rule can
    // hold at once.
    double most = 0;
    for (std::size_t i = 0; i < l.rules.size(); ++i) {
        double q = l.algo == algorithm::token_bucket ? l.rules[i].burst
                                                     : static_cast<double>(l.rules[i].limit);
        most = i == 0 ? q : std::min(most, q);
    }
    if (l.rules.empty() || most < 1) return;  // the rules' own errors say why
    auto cap = static_cast<std::int64_t>(std::floor(most));
    if (auto v = read_int(n, path, c, 1, cap)) l.lease = static_cast<int>(*v);
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
    auto algo = read_enum_of<algorithm>(o.get("algorithm", true), o.path("algorithm"), c,
                                        algorithm_names());
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
                    read_rule((*rules)[i], element(rules_path, i), c,
                              limiters::algorithm_facts(*algo), r);
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
    if (auto* s = o.get("sync")) read_sync(*s, o.path("sync"), c, l);
    o.finish();
}

// The most one request may cost on an enforced layer's rule: the row's capacity field.
std::optional<std::pair<double, const char*>> rule_capacity(algorithm a, const rule_config& r) {
    const auto& row = limiters::algorithm_facts(a);
    if (row.capacity_field < 0) return std::nullopt;
    const rule_field& f = *row.fields[static_cast<std::size_t>(row.capacity_field)];
    return std::pair{f.param(r), f.key};
}

}  // namespace detail

std::optional<std::string> cost_span_problem(const limiter_config& l, double cost) {
    const auto& row = limiters::algorithm_facts(l.algo);
    for (std::size_t i = 0; i < l.rules.size(); ++i)
        if (auto problem =
                limiters::span_problem(row, limiters::to_params(l.algo, l.rules[i]), cost))
            return "rules[" + std::to_string(i) + "]: " + *problem;
    return std::nullopt;
}

}  // namespace rategate::config
