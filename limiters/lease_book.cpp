#include "limiters/lease_book.hpp"

#include <algorithm>
#include <cmath>

namespace rategate::limiters {

namespace {
// A lease's spend rate is an exponentially decaying sum over about this long (µs): short
// enough to follow a load that rises within a few round trips.
constexpr double spend_window_us = 10'000;
}  // namespace

double lease_book::expiry_of(const layer_spec& spec, double decided_at) {
    double end = std::numeric_limits<double>::infinity();
    for (const auto& p : spec.rules) {
        if (spec.algo == config::algorithm::fixed_window) {
            // p = limit, window (µs): the window of `decided_at`, aligned to the epoch.
            end = std::min(end, std::floor(decided_at / p[1]) * p[1] + p[1]);
        } else {
            // p = rate, period (µs), burst: the time the bucket takes to fill.
            end = std::min(end, decided_at + p[2] * p[1] / p[0]);
        }
    }
    return end;
}

void lease_book::expire(entry& e, double now) {
    if (now < e.expiry_us) return;
    totals_.expired += e.permits;
    e.permits = 0;
    ++e.generation;
    e.expiry_us = std::numeric_limits<double>::infinity();  // until the next grant sets it
}

double lease_book::idle_after(const layer_spec& spec) {
    double life = expiry_of(spec, 0);  // token_bucket: burst / rate; fixed_window: the window
    if (spec.algo == config::algorithm::fixed_window) {
        life = std::numeric_limits<double>::infinity();
        for (const auto& p : spec.rules)
            life = std::min(life, p[1]);
    }
    return std::min(1e6, life / 2);
}

std::vector<lease_return> lease_book::take_idle(double now) {
    return take(now, true);
}

std::vector<lease_return> lease_book::take_all(double now) {
    return take(now, false);
}

std::vector<lease_return> lease_book::take(double now, bool idle_only) {
    std::vector<lease_return> out;
    for (auto& [key, e] : entries_) {
        expire(e, now);
        if (e.permits <= 0 || e.asked > 0 || !e.spec) continue;
        if (idle_only && now - e.used_us < idle_after(*e.spec)) continue;
        out.push_back({key, e.spec, e.permits, e.granted_at_us});
        e.permits = 0;
        ++e.generation;  // a reservation taken before does not come back to this lease
        e.expiry_us = std::numeric_limits<double>::infinity();
    }
    return out;
}

void lease_book::given_back(double permits, bool ok) {
    (ok ? totals_.given_back : totals_.expired) += permits;
}

lease_book::slot lease_book::slot_of(const std::string& key) {
    return slot(&entries_[key]);
}

lease_book::reservation lease_book::reserve(slot s, int lease, double cost, double now) {
    auto& e = *s.e_;
    expire(e, now);
    e.used_us = now;
    double since = std::max(0.0, now - e.spent_at_us);
    e.spend_rate = e.spend_rate * std::exp(-since / spend_window_us) + cost / spend_window_us;
    e.spent_at_us = now;
    reservation r;
    r.generation = e.generation;
    r.taken = std::min(cost, e.permits);
    e.permits -= r.taken;
    r.ask.need = cost - r.taken;
    double n = lease;
    // Renewed before it runs dry, one top-up in flight per key at a time: at N/4 permits left,
    // or earlier when what is left would not outlast two top-up round trips at the current
    // spend (a lease small for its load then asks again as soon as its last top-up is back).
    double low_water = std::max(n / 4, e.spend_rate * e.round_trip_us * 2);
    if (e.asked == 0 && (r.ask.need > 0 || e.permits <= low_water)) {
        r.top_up = std::max(0.0, n - e.permits);
        if (r.top_up > 0) e.asked_at_us = now;
    }
    e.asked += r.top_up;
    r.ask.want = r.ask.need + r.top_up;
    return r;
}

void lease_book::settle(slot s, const layer_spec& spec, int lease, const reservation& r,
                        const lease_grant* grant, bool admitted, double now, double expiry,
                        double granted_at) {
    auto& e = *s.e_;
    e.asked = std::max(0.0, e.asked - r.top_up);
    if (grant && r.top_up > 0) {
        // The answer to the key's one top-up in flight: its round trip, smoothed.
        double took = std::max(0.0, now - e.asked_at_us);
        e.round_trip_us = e.round_trip_us == 0 ? took : 0.75 * e.round_trip_us + 0.25 * took;
    }
    expire(e, now);
    if (!admitted) {
        // The request consumed nothing: what it took goes back, unless that lease expired.
        if (r.generation == e.generation)
            e.permits += r.taken;
        else
            totals_.expired += r.taken;
    }
    if (!grant) return;
    e.remaining = grant->remaining;
    e.reset_at_us = now + grant->reset_us;
    e.rule = grant->rule;
    // The request's need came out of the grant when it was admitted; the rest is the lease's.
    double add = grant->granted - (admitted ? r.ask.need : 0);
    if (add <= 0) return;
    ++totals_.grants;
    totals_.granted += add;
    e.used_us = now;
    e.spec = &spec;
    // The earliest grant among the permits: a fixed window's give-back needs their window.
    if (e.permits <= 0) e.granted_at_us = granted_at;
    e.granted_at_us = std::min(e.granted_at_us, granted_at);
    bool live = e.expiry_us != std::numeric_limits<double>::infinity();
    if (spec.algo == config::algorithm::fixed_window && live && e.permits > 0)
        e.expiry_us = std::min(e.expiry_us, expiry);  // permits never cross into a later window
    else
        e.expiry_us = expiry;
    e.permits += add;
    if (e.permits > lease) {
        totals_.expired += e.permits - lease;
        e.permits = lease;
    }
}

lease_book::standing lease_book::standing_of(const std::string& key, double now) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? standing{} : standing_of(it->second, now);
}

lease_book::standing lease_book::standing_of(slot s, double now) const {
    return standing_of(*s.e_, now);
}

lease_book::standing lease_book::standing_of(const entry& e, double now) {
    double permits = now < e.expiry_us ? e.permits : 0;
    return {e.remaining + permits, std::max(0.0, e.reset_at_us - now), e.rule};
}

double lease_book::unspent(const std::string& key, double now) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? 0 : unspent(it->second, now);
}

double lease_book::unspent(slot s, double now) const {
    return unspent(*s.e_, now);
}

double lease_book::unspent(const entry& e, double now) {
    return now < e.expiry_us ? e.permits : 0;
}

double lease_book::held(double now) const {
    double sum = 0;
    for (const auto& [key, e] : entries_)
        if (now < e.expiry_us) sum += e.permits;
    return sum;
}

}  // namespace rategate::limiters
