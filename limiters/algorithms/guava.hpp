// The acquire step shared by smooth_bursty.cpp and smooth_warming_up.cpp (internal).
// Lua twin: limiters/lua/65_guava.lua.
// Source: Guava's RateLimiter.tryAcquire(permits, timeout) with SmoothRateLimiter's resync()
// and reserveEarliestAvailable().
#pragma once

#include <algorithm>
#include <cmath>

#include "limiters/algorithms/twin.hpp"

namespace rategate::limiters::twin {

// Guava SmoothRateLimiter: tryAcquire(cost, timeout = delay) at time t — canAcquire, then
// resync and reserveEarliestAvailable. `stored_wait(stored, spend)` is the subclass's
// storedPermitsToWaitTime (0 for SmoothBursty). Updates stored and next_free in place.
template <class StoredWait>
rule_outcome guava_acquire(double& stored, double& next_free, double t, double cost, double delay,
                           double max_permits, double cool_down, double stable,
                           StoredWait stored_wait) {
    rule_outcome o;
    if (next_free - delay > t) {
        o.retry = std::ceil(next_free - t);
        return o;
    }
    if (t > next_free) {
        stored = std::min(max_permits, stored + (t - next_free) / cool_down);
        next_free = t;
    }
    double moment = next_free;
    double spend = std::min(cost, stored);
    double fresh = cost - spend;
    next_free = next_free + (stored_wait(stored, spend) + std::floor(fresh * stable));
    stored = stored - spend;
    o.ok = true;
    o.wait = std::max(moment - t, 0.0);
    o.reserved = o.wait > 0;
    return o;
}

}  // namespace rategate::limiters::twin
