// One event loop's leases of shared layers (SPEC §2 `sync`): per leased layer key, the permits
// this loop took from the shared counter in Redis and has not spent yet, until they expire.
// One book per event loop (gateway/limiting/pipeline.hpp), so no locks; a reload builds a new
// pipeline and so ends every lease (the old book's unspent permits go back: take_all()). Sans-I/O:
// the pipeline asks reserve() what a request's call must ask of Redis for a leased layer and tells
// settle() what came back.
//
// Bounds kept here: a key's unspent permits plus the top-up asked in flight never exceed N (a
// grant beyond it is dropped), and permits are used only before their expiry: `burst / rate`
// after the grant (token_bucket), the end of the window they were counted in (fixed_window).
//
// Idle give-back: a lease with unspent permits that no request has reserved from for
// idle_after() (the smaller of 1 s and half the lease's life: half of `burst / rate`, or of the
// window) and with no top-up in flight is handed out by take_idle(); its permits leave the lease
// at once (a request that reserved before and is refused later does not put its permits back)
// and go back to Redis in one give-back call (limiters/lua/give_back/give_back.lua). A stop or a
// reload hands out every lease's unspent permits at once, idle or not (take_all()).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "limiters/chain.hpp"

namespace rategate::limiters {

class lease_book {
    struct entry;

  public:
    /// A key's lease, found once: entries are never removed, so a slot stays valid for the
    /// book's life and spares a lookup (a hash of the key) on every later call.
    class slot {
      public:
        slot() = default;
        explicit operator bool() const { return e_ != nullptr; }

      private:
        explicit slot(entry* e) : e_(e) {}
        entry* e_ = nullptr;
        friend class lease_book;
    };
    /// The slot of `key`'s lease (made empty on first use).
    slot slot_of(const std::string& key);
    /// What one leased layer of one request took from the lease and asks of Redis.
    struct reservation {
        double taken = 0;   ///< permits of the request's cost served by the lease
        lease_ask ask;      ///< for the call (want 0: nothing to ask, the lease serves it all)
        double top_up = 0;  ///< want - need: permits asked for the lease itself
        std::uint64_t generation = 0;
    };
    /// Running totals of this book (for the metrics).
    struct totals {
        std::uint64_t grants = 0;  ///< calls that added permits to a lease
        double granted = 0;        ///< permits added to leases
        double expired = 0;        ///< permits dropped unused: expired, or beyond N
        double given_back = 0;     ///< permits of idle leases returned to Redis
    };
    /// A leased layer's standing for the rate-limit headers.
    struct standing {
        double remaining = 0;  ///< Redis's remaining after the last grant + unspent permits
        double reset_us = 0;   ///< µs from now until the counter is full again, as last told
        int rule = 0;          ///< the rule these are of
    };

    /// The time a lease granted at `decided_at_us` (the limiter clock, µs) expires, on that
    /// clock: `burst / rate` later (token_bucket; the earliest over the rules), the end of the
    /// window it was counted in (fixed_window; the earliest window end over the rules).
    static double expiry_of(const layer_spec& spec, double decided_at_us);

    /// Serves what it can of a request of `cost` permits from `key`'s lease (N = `lease`
    /// permits) at `now_us` (the local clock), and says what the call must ask: `need`, the
    /// rest of the cost; and a top-up to N when no top-up is in flight and the lease would be
    /// left with N/4 or fewer permits, or with fewer than it spends in two top-up round trips
    /// (its recent spend rate times its top-ups' smoothed call time). Every reservation goes
    /// back through settle().
    reservation reserve(slot s, int lease, double cost, double now_us);
    reservation reserve(const std::string& key, int lease, double cost, double now_us) {
        return reserve(slot_of(key), lease, cost, now_us);
    }

    /// Ends a reservation. `grant`: the lease record of its call (null: no call, or it failed);
    /// `admitted`: the request was admitted (else the permits it took go back to the lease);
    /// `expiry_us`: when permits granted by that call expire (local clock); `granted_at_us`:
    /// the call's time on the limiter clock (for a give-back). A grant beyond N unspent permits
    /// is dropped.
    void settle(slot s, const layer_spec& spec, int lease, const reservation& r,
                const lease_grant* grant, bool admitted, double now_us, double expiry_us,
                double granted_at_us = 0);
    void settle(const std::string& key, const layer_spec& spec, int lease, const reservation& r,
                const lease_grant* grant, bool admitted, double now_us, double expiry_us,
                double granted_at_us = 0) {
        settle(slot_of(key), spec, lease, r, grant, admitted, now_us, expiry_us, granted_at_us);
    }

    /// How long (µs) a lease of `spec` stays unused before it is given back: the smaller of
    /// 1 s and half its life (`burst / rate`, or the window; the shortest over the rules).
    static double idle_after(const layer_spec& spec);

    /// Takes the unspent permits of every lease idle at `now_us` (local clock) out of the book,
    /// to be given back to Redis: no request reserved from it for idle_after(), no top-up in
    /// flight, not expired. Each goes with its spec (as settle() last saw it) and the
    /// limiter-clock time of its earliest grant. Report the call's outcome to given_back().
    std::vector<lease_return> take_idle(double now_us);
    /// As take_idle(), idle or not: every lease's unspent permits (a stop gives them back).
    std::vector<lease_return> take_all(double now_us);

    /// Counts `permits` handed out by take_idle() or take_all(): returned to Redis when `ok`, else
    /// dropped.
    void given_back(double permits, bool ok);

    /// `key`'s standing at `now_us` (zeros before its first grant).
    standing standing_of(const std::string& key, double now_us) const;
    standing standing_of(slot s, double now_us) const;

    /// Unspent permits of `key`'s lease at `now_us` (0 once expired).
    double unspent(const std::string& key, double now_us) const;
    double unspent(slot s, double now_us) const;

    /// Unspent permits of every lease at `now_us` (expired ones left out).
    double held(double now_us) const;

    const totals& running_totals() const { return totals_; }

  private:
    struct entry {
        double permits = 0;  ///< unspent, not reserved by a request in flight
        double expiry_us = -std::numeric_limits<double>::infinity();
        std::uint64_t generation = 0;  ///< changes when the permits expire
        double asked = 0;              ///< top-up permits asked by calls in flight
        double remaining = 0, reset_at_us = 0;
        int rule = 0;
        double used_us = 0;                ///< local clock: the last reservation or grant
        double granted_at_us = 0;          ///< limiter clock: the earliest grant of the permits
        const layer_spec* spec = nullptr;  ///< as settle() last saw it
        double spend_rate = 0;             ///< permits per µs reserved, recent (decaying sum)
        double spent_at_us = 0;            ///< local clock: the last reservation
        double asked_at_us = 0;            ///< local clock: when the top-up in flight was asked
        double round_trip_us = 0;          ///< a top-up's call, smoothed (0: none answered yet)
    };
    void expire(entry& e, double now_us);
    std::vector<lease_return> take(double now_us, bool idle_only);
    static standing standing_of(const entry& e, double now_us);
    static double unspent(const entry& e, double now_us);

    std::unordered_map<std::string, entry> entries_;
    totals totals_;
};

}  // namespace rategate::limiters
