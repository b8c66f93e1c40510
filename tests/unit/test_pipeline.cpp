// The request path's limit checks without a socket: a scripted backend stands in for Redis.
#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include "config/config.hpp"
#include "gateway/admin/metrics.hpp"
#include "gateway/limiting/pipeline.hpp"
#include "limiters/local/local_backend.hpp"

using namespace rategate;
namespace net = boost::asio;

namespace {

// Redis as far as the checker can tell: decides in its own store (reporting the deciding
// layer's state when asked, as the chain script does), or fails every call while `down`.
class scripted_backend final : public limiters::backend {
  public:
    net::awaitable<answer> decide(const std::vector<limiters::layer_ref>& refs, double cost,
                                  const limiters::clock& at, bool want_state) override {
        ++calls;
        if (down) {
            answer a;
            a.ec = std::make_error_code(std::errc::connection_refused);
            co_return a;
        }
        co_return co_await inner.decide(refs, cost, at, want_state);
    }
    bool ready() const override { return !down; }
    std::uint64_t epoch() const override { return reconnects; }

    bool down = false;
    std::uint64_t reconnects = 1;
    int calls = 0;
    limiters::local_store store;
    limiters::local_backend inner{store};
};

std::shared_ptr<const config::config> make_config(const char* on_redis_error) {
    return config::parse_config(std::string(R"({
      "listen": "127.0.0.1:8080",
      "redis": { "url": "redis://127.0.0.1:1/0" },
      "identity": { "user": { "header": "X-User-Id" } },
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "limiters": {
        "global": { "scope": "global", "algorithm": "token_bucket",
                    "rules": [{ "rate": 100000, "period": "1s", "burst": 100000 }] },
        "per-user": { "scope": "user", "algorithm": "token_bucket",
                      "rules": [{ "rate": 1, "period": "1h", "burst": 3 }] }
      },
      "routes": [ { "name": "api", "match": { "path_prefix": "/" }, "upstream": "u",
                    "limiters": ["global", "per-user"], "on_redis_error": ")") +
                                    on_redis_error + R"(" } ]
    })",
                                "t.json");
}

struct fixture {
    explicit fixture(const char* policy_name = "deny")
        : cfg(make_config(policy_name)),
          pol(*cfg),
          metrics(cfg->routes.size(), cfg->limiters.size(), cfg->upstreams.size()),
          checker(*cfg, pol, local, metrics, &redis, clock) {}

    gateway::limiting::outcome check(const char* user) {
        limiters::identity who{std::string_view(user), "10.0.0.1", {}};
        auto f = net::co_spawn(ioc, checker.check(0, who, 1), net::use_future);
        ioc.restart();
        ioc.run();
        return f.get();
    }
    std::uint64_t decisions(const char* limiter, gateway::limiter_outcome o) {
        auto i = static_cast<std::size_t>(
            std::distance(cfg->limiters.begin(), cfg->limiters.find(limiter)));
        return metrics.limiter_decisions[i][static_cast<std::size_t>(o)].get();
    }

    net::io_context ioc;
    std::shared_ptr<const config::config> cfg;
    limiters::policy pol;
    limiters::local_store local;
    gateway::loop_metrics metrics;
    scripted_backend redis;
    limiters::wall_clock clock;
    gateway::limiting::pipeline checker;
};

using kind = gateway::limiting::verdict;

}  // namespace

TEST_CASE("limiting pipeline: a flood is answered from the over-limit cache, counted like Redis") {
    fixture f;
    for (int i = 0; i < 3; ++i)
        CHECK(f.check("flooder").what == kind::allowed);
    auto first = f.check("flooder");  // Redis rejects and reports the state
    CHECK(first.what == kind::limited);
    CHECK(first.decider->limiter->name == "per-user");
    int calls = f.redis.calls;
    for (int i = 0; i < 100; ++i) {
        auto o = f.check("flooder");
        REQUIRE(o.what == kind::limited);
        CHECK(o.decider->limiter->name == "per-user");
        CHECK(o.header == o.decider);
        CHECK(o.decision.retry_us > 3.5e9);  // an hour per token, minus a little
        CHECK(o.decision.remaining == 0);
    }
    CHECK(f.redis.calls == calls);  // not one more call
    CHECK(f.metrics.limiter_cache_hits[1].get() == 100);
    CHECK(f.decisions("per-user", gateway::limiter_outcome::limited) == 101);
    CHECK(f.check("bystander").what == kind::allowed);  // another user still goes to Redis
    CHECK(f.redis.calls == calls + 1);
    // Redis reconnected (restart, failover): what the cache learned may no longer hold.
    f.redis.reconnects = 2;
    CHECK(f.check("flooder").what == kind::limited);
    CHECK(f.redis.calls == calls + 2);  // asked again
    CHECK(f.check("flooder").what == kind::limited);
    CHECK(f.redis.calls == calls + 2);  // and cached again
}

TEST_CASE("limiting pipeline: a failing backend follows the route's on_redis_error") {
    SUBCASE("deny") {
        fixture f("deny");
        f.redis.down = true;
        auto o = f.check("u");
        CHECK(o.what == kind::error);
        CHECK(!o.forward);  // 503
        CHECK(o.redis_error);
        CHECK(f.decisions("per-user", gateway::limiter_outcome::error) == 1);
    }
    SUBCASE("allow") {
        fixture f("allow");
        f.redis.down = true;
        for (int i = 0; i < 5; ++i) {
            auto o = f.check("u");
            CHECK(o.what == kind::error);  // fail open, however many
            CHECK(o.forward);
        }
    }
    SUBCASE("local: the in-process twin limits, without asking the backend") {
        fixture f("local");
        f.redis.down = true;
        std::vector<kind> got;
        for (int i = 0; i < 5; ++i)
            got.push_back(f.check("u").what);
        CHECK(got == std::vector<kind>{kind::allowed, kind::allowed, kind::allowed, kind::limited,
                                       kind::limited});
        CHECK(f.redis.calls == 0);  // not ready: straight to the twin
    }
    SUBCASE("the cache does not answer while the backend is down") {
        fixture f("deny");
        for (int i = 0; i < 4; ++i)
            f.check("flooder");
        f.redis.down = true;
        auto o = f.check("flooder");  // what Redis "would give": nothing
        CHECK(o.what == kind::error);
        CHECK(!o.forward);
    }
}

TEST_CASE("shaping: a request refused by a later delay layer leaves no held entry behind") {
    // Two delay layers; the global one holds its 1,024 requests per key and event loop.
    auto cfg = config::parse_config(R"({
      "listen": "127.0.0.1:8080",
      "identity": { "user": { "header": "X-User-Id" } },
      "upstreams": { "u": { "targets": ["127.0.0.1:9001"] } },
      "limiters": {
        "paced-user": { "scope": "user", "algorithm": "token_bucket", "delay": "10s",
                        "rules": [{ "rate": 1000, "period": "1s", "burst": 1 }] },
        "paced-global": { "scope": "global", "algorithm": "token_bucket", "delay": "1h",
                          "rules": [{ "rate": 1, "period": "1s", "burst": 1 }] }
      },
      "routes": [ { "name": "api", "match": { "path_prefix": "/" }, "upstream": "u",
                    "limiters": ["paced-user", "paced-global"] } ]
    })",
                                    "t.json");
    limiters::policy pol(*cfg);
    limiters::local_store local;
    gateway::loop_metrics metrics(1, 2, 1);
    limiters::wall_clock clock;
    gateway::limiting::pipeline checker(*cfg, pol, local, metrics, nullptr, clock);
    net::io_context ioc;
    auto work = net::make_work_guard(ioc);  // poll() must not find it stopped
    std::vector<std::string> users;
    for (int i = 0; i < 1025; ++i)
        users.push_back("u" + std::to_string(i));
    std::vector<std::future<gateway::limiting::outcome>> held;
    for (int i = 0; i < 1025; ++i) {
        limiters::identity who{
            std::string_view(users[static_cast<std::size_t>(i)]), "10.0.0.1", {}};
        held.push_back(net::co_spawn(ioc, checker.check(0, who, 1), net::use_future));
        ioc.poll();
    }
    // The first passed at once; 1,024 wait for the global bucket, each also on its user key.
    CHECK(checker.held_keys() == 1025);
    limiters::identity late{std::string_view("late"), "10.0.0.1", {}};
    auto refused = net::co_spawn(ioc, checker.check(0, late, 1), net::use_future);
    ioc.poll();
    REQUIRE(refused.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
    auto o = refused.get();
    CHECK(o.what == kind::limited);
    CHECK(o.decider->limiter->name == "paced-global");
    CHECK(checker.held_keys() == 1025);  // nothing left behind for "late"
    ioc.stop();
}
