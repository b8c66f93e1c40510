// Leased shared layers (SPEC §2 `sync`) without a socket: the lease book's arithmetic, and the
// limiting pipeline over a backend that takes leases as the chain script does (its C++ twin,
// held to the Lua script by tests/redis/test_parity.cpp).
#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include "config/config.hpp"
#include "gateway/admin/metrics.hpp"
#include "gateway/limiting/pipeline.hpp"
#include "limiters/lease_book.hpp"

#include <algorithm>
#include <map>
#include <string>

using namespace rategate;
namespace net = boost::asio;
using limiters::lease_book;
using limiters::lease_grant;

namespace {

constexpr double s = 1e6;  // µs

const limiters::layer_spec bucket{config::algorithm::token_bucket, {{10, 1 * s, 40, 0}}, false, 0};
const limiters::layer_spec window{config::algorithm::fixed_window, {{30, 10 * s, 0, 0}}, false, 0};

}  // namespace

TEST_CASE("lease book: a lease's expiry is burst/rate after the grant, or its window's end") {
    CHECK(lease_book::expiry_of(bucket, 100 * s) == 104 * s);  // 40 permits at 10 per second
    CHECK(lease_book::expiry_of(window, 123 * s) == 130 * s);  // windows aligned to the epoch
    limiters::layer_spec two{
        config::algorithm::fixed_window, {{30, 10 * s, 0, 0}, {5, 4 * s, 0, 0}}, false, 0};
    CHECK(lease_book::expiry_of(two, 123 * s) == 124 * s);  // the earliest window end
}

TEST_CASE(
    "lease book: asks N when empty, serves from the lease, renews at N/4 with one top-up "
    "in flight, gives a refused request's permit back, drops what expires") {
    lease_book book;
    const int n = 8;
    double now = 100 * s;
    auto first = book.reserve("g", n, 1, now);
    CHECK(first.taken == 0);
    CHECK(first.ask.need == 1);
    CHECK(first.ask.want == 9);  // the request's permit and a lease of N
    // While that call is in flight another request asks only its own need: one top-up at a time.
    auto second = book.reserve("g", n, 1, now);
    CHECK(second.ask.need == 1);
    CHECK(second.ask.want == 1);
    lease_grant g{9, 20, 2 * s, 0};
    book.settle("g", bucket, n, first, &g, true, now, lease_book::expiry_of(bucket, now));
    lease_grant g2{1, 19, 2 * s, 0};
    book.settle("g", bucket, n, second, &g2, true, now, lease_book::expiry_of(bucket, now));
    CHECK(book.held(now) == 8);
    CHECK(book.running_totals().grants == 1);
    CHECK(book.running_totals().granted == 8);
    // remaining = Redis's after the last grant + the unspent permits.
    CHECK(book.standing_of("g", now).remaining == 19 + 8);
    CHECK(book.standing_of("g", now).reset_us == 2 * s);
    // Served locally: nothing to ask until 2 (N/4) or fewer are left.
    for (int i = 0; i < 5; ++i) {
        auto r = book.reserve("g", n, 1, now);
        CHECK(r.taken == 1);
        CHECK(r.ask.want == 0);
        book.settle("g", bucket, n, r, nullptr, true, now, 0);
    }
    CHECK(book.held(now) == 3);
    auto low = book.reserve("g", n, 1, now);  // leaves 2: a top-up to N rides along
    CHECK(low.taken == 1);
    CHECK(low.ask.need == 0);
    CHECK(low.ask.want == 6);
    // The request is refused by an exact layer: its permit stays, and the top-up is kept.
    lease_grant top{6, 10, 1 * s, 0};
    book.settle("g", bucket, n, low, &top, false, now, lease_book::expiry_of(bucket, now));
    // 2 left + the refused request's 1 + 6 granted: one beyond N, dropped.
    CHECK(book.running_totals().expired == 1);
    CHECK(book.held(now) == 8);
    // Expiry: 4 s (burst / rate) after the last grant, the permits are gone.
    CHECK(book.held(now + 4 * s - 1) == 8);
    CHECK(book.held(now + 4 * s) == 0);
    auto late = book.reserve("g", n, 1, now + 4 * s);
    CHECK(late.taken == 0);
    CHECK(late.ask.need == 1);
    CHECK(book.running_totals().expired == 9);
    book.settle("g", bucket, n, late, nullptr, false, now + 4 * s, 0);
}

TEST_CASE("lease book: under load a lease renews before it runs dry, whatever N/4 says") {
    // 25,000 requests a second (one per 40 µs) on a lease of N = 100, and a top-up answered
    // 1.5 ms after it is asked: N/4 = 25 permits last 1 ms, less than the call. Renewed at N/4
    // the lease would run dry every cycle and send those requests' permits to Redis; renewed
    // by its spend and round trip, requests are served from it once the first answers came.
    const limiters::layer_spec big{
        config::algorithm::token_bucket, {{1e6, 1 * s, 1e6, 0}}, false, 0};
    lease_book book;
    auto g = book.slot_of("g");
    const int n = 100;
    const double step = 40, round_trip = 1500;
    struct in_flight {
        double at;
        lease_book::reservation r;
    };
    std::vector<in_flight> calls;
    int from_redis = 0, served = 0;
    for (double now = 0; now < 300'000; now += step) {
        // Answers due by now, in order.
        std::sort(calls.begin(), calls.end(),
                  [](const in_flight& a, const in_flight& b) { return a.at < b.at; });
        std::size_t done = 0;
        for (; done < calls.size() && calls[done].at <= now; ++done) {
            const auto& c = calls[done];
            lease_grant grant{c.r.ask.want, 1e6, 0, 0};
            book.settle(g, big, n, c.r, &grant, true, c.at, lease_book::expiry_of(big, c.at));
        }
        calls.erase(calls.begin(), calls.begin() + static_cast<std::ptrdiff_t>(done));
        auto r = book.reserve(g, n, 1, now);
        if (now >= 50'000) (r.ask.need > 0 ? from_redis : served) += 1;
        if (r.ask.want > 0) {
            calls.push_back({now + round_trip, r});
        } else {
            book.settle(g, big, n, r, nullptr, true, now, 0);
        }
    }
    CHECK(served > 6000);
    CHECK(from_redis == 0);
}

TEST_CASE("lease book: a slot is its key's lease, still after many more keys joined the book") {
    lease_book book;
    double now = 100 * s;
    auto g = book.slot_of("g");
    auto r = book.reserve(g, 8, 1, now);
    lease_grant grant{9, 20, 2 * s, 0};
    // Thousands of other leases make the table grow (rehash) between the call and its answer.
    for (int i = 0; i < 5000; ++i)
        book.reserve("k" + std::to_string(i), 8, 1, now);
    book.settle(g, bucket, 8, r, &grant, true, now, lease_book::expiry_of(bucket, now));
    CHECK(book.unspent(g, now) == 8);
    CHECK(book.unspent("g", now) == 8);  // the key and its slot are one lease
    CHECK(book.slot_of("g").operator bool());
    auto by_key = book.reserve("g", 8, 3, now);
    CHECK(by_key.taken == 3);
    CHECK(book.unspent(g, now) == 5);
    CHECK(book.standing_of(g, now).remaining == book.standing_of("g", now).remaining);
}

TEST_CASE("lease book: a permit reserved before its lease expired does not come back after") {
    lease_book book;
    double now = 105 * s;
    auto r = book.reserve("w", 10, 1, now);
    lease_grant g{10, 20, 5 * s, 0};
    book.settle("w", window, 10, r, &g, true, now, lease_book::expiry_of(window, now));
    CHECK(book.held(now) == 9);
    auto in_flight = book.reserve("w", 10, 1, now);
    CHECK(in_flight.taken == 1);
    // The window ends (110 s) while that request's call is in flight; it is then refused.
    double later = 110 * s;
    auto next = book.reserve("w", 10, 1, later);
    CHECK(next.taken == 0);
    book.settle("w", window, 10, in_flight, nullptr, false, later, 0);
    CHECK(book.held(later) == 0);
    // A fixed window's permits never move into a later window: the earlier expiry stays.
    lease_grant g2{10, 10, 5 * s, 0};
    book.settle("w", window, 10, next, &g2, true, later, lease_book::expiry_of(window, later));
    CHECK(book.held(later) == 9);
    CHECK(book.held(120 * s) == 0);
}

TEST_CASE("lease book: an idle lease is handed out whole for a give-back, a used one is not") {
    lease_book book;
    // Idle after the smaller of 1 s and half the lease's life: a bucket of 40 at 10/s lives
    // 4 s (idle after 1 s); a window of 10 s, 1 s; a bucket of 10 at 10/s, 0.5 s.
    CHECK(lease_book::idle_after(bucket) == 1 * s);
    CHECK(lease_book::idle_after(window) == 1 * s);
    limiters::layer_spec quick{config::algorithm::token_bucket, {{10, 1 * s, 10, 0}}, false, 0};
    CHECK(lease_book::idle_after(quick) == 0.5 * s);
    double now = 100 * s, granted_at = 7e12;  // the limiter clock may differ from the local one
    auto r = book.reserve("b", 10, 1, now);
    lease_grant g{11, 20, 2 * s, 0};
    book.settle("b", bucket, 10, r, &g, true, now, lease_book::expiry_of(bucket, now), granted_at);
    CHECK(book.held(now) == 10);
    // Used 0.9 s later: not idle for another second.
    auto used = book.reserve("b", 10, 1, now + 0.9 * s);
    book.settle("b", bucket, 10, used, nullptr, true, now + 0.9 * s, 0);
    CHECK(book.take_idle(now + 1.5 * s).empty());
    // A request reserves one permit and is still in flight when the lease goes idle.
    auto in_flight = book.reserve("b", 10, 1, now + 1.0 * s);
    auto idle = book.take_idle(now + 2.1 * s);
    REQUIRE(idle.size() == 1);
    CHECK(idle[0].key == "b");
    CHECK(idle[0].permits == 8);
    CHECK(idle[0].granted_at_us == granted_at);
    CHECK(idle[0].spec == &bucket);
    CHECK(book.held(now + 2.1 * s) == 0);
    CHECK(book.take_idle(now + 2.2 * s).empty());  // handed out once
    // The refused request's permit does not come back to a lease given back meanwhile.
    book.settle("b", bucket, 10, in_flight, nullptr, false, now + 2.2 * s, 0);
    CHECK(book.held(now + 2.2 * s) == 0);
    book.given_back(8, true);
    book.given_back(3, false);
    CHECK(book.running_totals().given_back == 8);
    CHECK(book.running_totals().expired == 1 + 3);
    // An expired lease is not given back (its permits expired), nor one with a top-up in flight.
    auto r2 = book.reserve("w", 10, 1, now);
    lease_grant g2{11, 20, 2 * s, 0};
    book.settle("w", window, 10, r2, &g2, true, now, lease_book::expiry_of(window, now), 1);
    book.reserve("w", 10, 8, now);  // down to 2 <= N/4: a top-up goes with this reservation
    CHECK(book.take_idle(now + 1.5 * s).empty());
    CHECK(book.take_idle(now + 20 * s).empty());
}

namespace {

// Redis with leases, as far as the pipeline can tell: the chain script's C++ twin over a store
// shared by every "event loop" (pipeline), or failing every call while `down`.
class leasing_backend final : public limiters::backend {
  public:
    explicit leasing_backend(limiters::local_store& store) : store_(store) {}
    net::awaitable<answer> decide(const std::vector<limiters::layer_ref>& refs, double cost,
                                  const limiters::clock& at, bool) override {
        ++calls;
        answer a;
        if (down) {
            a.ec = std::make_error_code(std::errc::connection_refused);
            co_return a;
        }
        a.decided_at_us = at.now_us();
        a.decision = store_.decide(refs, a.decided_at_us, cost, &a.grants);
        co_return a;
    }
    bool leases() const override { return true; }
    bool ready() const override { return !down; }

    bool down = false;
    int calls = 0;

  private:
    limiters::local_store& store_;
};

std::shared_ptr<const config::config> leased_config(const char* global) {
    return config::parse_config(std::string(R"({
      "listen": "127.0.0.1:8080",
      "redis": { "url": "redis://127.0.0.1:1/0" },
      "identity": { "user": { "header": "X-User-Id" } },
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "limiters": {
        "global": )") + global + R"(,
        "per-user": { "scope": "user", "algorithm": "fixed_window",
                      "rules": [{ "limit": 7, "window": "1h" }] }
      },
      "routes": [ { "name": "api", "match": { "path_prefix": "/" }, "upstream": "u",
                    "limiters": ["global", "per-user"], "on_redis_error": "deny" },
                  { "name": "open", "match": { "path_prefix": "/open" }, "upstream": "u",
                    "limiters": ["global"], "on_redis_error": "deny" } ]
    })",
                                "t.json");
}

// Two event loops of one instance: a pipeline each, over one shared store.
struct two_loops {
    explicit two_loops(const char* global)
        : cfg(leased_config(global)),
          pol(*cfg),
          metrics_a(cfg->routes.size(), cfg->limiters.size(), cfg->upstreams.size()),
          metrics_b(cfg->routes.size(), cfg->limiters.size(), cfg->upstreams.size()),
          a(*cfg, pol, local, metrics_a, &redis_a, clock),
          b(*cfg, pol, local, metrics_b, &redis_b, clock) {}

    gateway::limiting::outcome check(gateway::limiting::pipeline& p, std::size_t route,
                                     const std::string& user) {
        limiters::identity who{std::string_view(user), "10.0.0.1", {}};
        auto f = net::co_spawn(ioc, p.check(route, who, 1), net::use_future);
        // Until it is answered: a loop whose leases hold permits keeps a sweep going.
        ioc.restart();
        while (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
            ioc.run_one();
        return f.get();
    }

    net::io_context ioc;
    std::shared_ptr<const config::config> cfg;
    limiters::policy pol;
    limiters::local_store local, shared;
    leasing_backend redis_a{shared}, redis_b{shared};
    gateway::loop_metrics metrics_a, metrics_b;
    limiters::manual_clock clock{1000 * s};
    gateway::limiting::pipeline a, b;
};

using kind = gateway::limiting::verdict;

}  // namespace

TEST_CASE(
    "leased pipeline: two loops admit at most the bucket plus N per loop, each user's limit "
    "stays exact") {
    // A bucket of 60 that refills 1 per hour, leased 10 at a time; users of 7 per hour.
    two_loops t(R"({ "scope": "global", "algorithm": "token_bucket", "sync": { "lease": 10 },
                     "rules": [{ "rate": 1, "period": "1h", "burst": 60 }] })");
    int admitted = 0, requests = 0;
    std::map<std::string, int> per_user;
    for (int round = 0; round < 10; ++round)
        for (int u = 0; u < 12; ++u) {
            std::string user = "u" + std::to_string(u);
            auto& loop = (round + u) % 2 ? t.a : t.b;
            auto o = t.check(loop, 0, user);
            ++requests;
            if (o.forward) {
                ++admitted;
                ++per_user[user];
            } else {
                CHECK(o.what == kind::limited);
                CHECK(o.decision.remaining == 0);
            }
        }
    CHECK(admitted <= 60);           // leases never admit beyond what the counter granted
    CHECK(admitted >= 60 - 2 * 10);  // at most N per loop held unused
    for (const auto& [user, n] : per_user)
        CHECK(n <= 7);
    MESSAGE("leased: " << admitted << " admitted of " << requests);
    CHECK(t.metrics_a.lease_grants.get() > 0);
    CHECK(t.metrics_a.lease_permits.get() > 0);
}

TEST_CASE(
    "leased pipeline: a chain of leased layers alone calls Redis about once per 3N/4 "
    "requests, the renewal riding on a request before the lease runs dry") {
    two_loops t(R"({ "scope": "global", "algorithm": "token_bucket", "sync": { "lease": 20 },
                     "rules": [{ "rate": 1, "period": "1h", "burst": 1000 }] })");
    for (int i = 0; i < 300; ++i)
        REQUIRE(t.check(t.a, 1, "x").forward);
    MESSAGE("300 requests, " << t.redis_a.calls << " calls");
    CHECK(t.redis_a.calls <= 300 / 15 + 1);
    CHECK(t.redis_a.calls >= 300 / 21);
}

TEST_CASE(
    "leased pipeline: a request the exact layer refuses leaves its permit in the lease; the "
    "leased layer's remaining is Redis's plus the unspent permits") {
    two_loops t(R"({ "scope": "global", "algorithm": "fixed_window", "sync": { "lease": 5 },
                     "rules": [{ "limit": 100, "window": "1h" }] })");
    auto first = t.check(t.a, 1, "x");  // route "open": the global layer alone
    REQUIRE(first.forward);
    // Redis counted the request and a lease of 5: 94 left there, 5 unspent here.
    CHECK(first.header->limiter->name == "global");
    CHECK(first.decision.remaining == 94 + 5);
    CHECK(t.redis_a.calls == 1);
    auto second = t.check(t.a, 1, "x");
    CHECK(second.forward);
    CHECK(t.redis_a.calls == 1);  // from the lease
    CHECK(second.decision.remaining == 94 + 4);
    // Spend the user's 7 on route "api" (the per-user layer always calls Redis).
    for (int i = 0; i < 7; ++i)
        REQUIRE(t.check(t.a, 0, "spender").forward);
    auto refused = t.check(t.a, 0, "spender");
    CHECK(refused.what == kind::limited);
    CHECK(refused.decider->limiter->name == "per-user");
    // Grants move permits from Redis's count to the lease, so the sum only falls by what was
    // admitted: 2 + 7, and nothing for the refused request.
    auto after = t.check(t.a, 1, "x");
    CHECK(after.forward);
    CHECK(after.decision.remaining == 98 - 7 - 1);
    // The other loop holds no lease: its first request takes one, and sees Redis's count.
    auto other = t.check(t.b, 1, "x");
    CHECK(other.decision.remaining < after.decision.remaining);
}

TEST_CASE(
    "leased pipeline: while Redis fails a loop admits from its lease, then on_redis_error "
    "applies; a lease on the exact layers' route does not bypass it") {
    two_loops t(R"({ "scope": "global", "algorithm": "token_bucket", "sync": { "lease": 6 },
                     "rules": [{ "rate": 1, "period": "1s", "burst": 100 }] })");
    REQUIRE(t.check(t.a, 1, "x").forward);  // takes the request's permit and a lease of 6
    t.redis_a.down = true;
    int admitted = 0;
    for (int i = 0; i < 10; ++i) {
        auto o = t.check(t.a, 1, "x");
        if (o.forward) {
            ++admitted;
            CHECK(o.what == kind::allowed);
        } else {
            CHECK(o.what == kind::error);  // "deny": 503
            CHECK(o.redis_error);
        }
    }
    CHECK(admitted == 6);
    // With an exact layer in the chain Redis must decide it: on_redis_error at once.
    t.redis_b.down = true;
    auto exact = t.check(t.b, 0, "someone");
    CHECK_FALSE(exact.forward);
    CHECK(exact.what == kind::error);
    // The lease expires after burst / rate (100 s): nothing is admitted from it later.
    t.redis_a.down = false;
    auto again = t.check(t.a, 1, "x");
    CHECK(again.forward);
    t.redis_a.down = true;
    t.clock.set(t.clock.now_us() + 101 * s);
    CHECK_FALSE(t.check(t.a, 1, "x").forward);
    CHECK(t.metrics_a.lease_permits_expired.get() > 0);
}

TEST_CASE("leased pipeline: a reload (a new pipeline) ends the old loop's lease") {
    two_loops t(R"({ "scope": "global", "algorithm": "fixed_window", "sync": { "lease": 10 },
                     "rules": [{ "limit": 100, "window": "1h" }] })");
    REQUIRE(t.check(t.a, 1, "x").forward);  // takes 1 + a lease of 10
    REQUIRE(t.check(t.a, 1, "x").forward);
    CHECK(t.redis_a.calls == 1);
    // The runtime a reload builds has a pipeline of its own: it starts without a lease, and the
    // old lease's 9 unspent permits stay consumed in Redis (never admitted: at most N held).
    gateway::limiting::pipeline reloaded(*t.cfg, t.pol, t.local, t.metrics_a, &t.redis_a, t.clock);
    auto o = t.check(reloaded, 1, "x");
    CHECK(o.forward);
    CHECK(t.redis_a.calls == 2);
    CHECK(o.decision.remaining == 100 - 11 - 11 + 10);
}
