// combine_parts (limiters/redis/cluster_backend.hpp): a chain split by hash slot and decided
// part by part must get the decision the chain script gives the whole chain in one call. The
// whole-chain reference is the in-process twin (local_store, held to the Lua script by the
// parity tests): each part is decided on its own fresh store, the whole chain on another.
#include <doctest/doctest.h>

#include <random>

#include "limiters/local/local_store.hpp"
#include "limiters/redis/cluster_backend.hpp"

using namespace rategate;
using namespace rategate::limiters;

namespace {

layer_spec spec(config::algorithm a, std::vector<rule_params> rules, bool shadow = false,
                double delay_us = 0) {
    layer_spec s;
    s.algo = a;
    s.rules = std::move(rules);
    s.shadow = shadow;
    s.delay_us = delay_us;
    return s;
}

void check_same(const chain_decision& a, const chain_decision& b) {
    CHECK(a.allowed == b.allowed);
    CHECK(a.decider == b.decider);
    CHECK(a.wait_us == b.wait_us);
    CHECK(a.retry_us == b.retry_us);
    CHECK(a.header_layer == b.header_layer);
    CHECK(a.remaining == b.remaining);
    CHECK(a.reset_us == b.reset_us);
    CHECK(a.rule == b.rule);
    CHECK(a.shadow_mask == b.shadow_mask);
}

}  // namespace

TEST_CASE("a chain decided by slot parts gets the whole chain's decision") {
    // Fixed-window and token-bucket layers with small limits, some shadow, one with a delay:
    // requests drive them into every combination of admitting and rejecting layers.
    std::vector<layer_spec> specs = {
        spec(config::algorithm::fixed_window, {{5, 60e6, 0, 0}}),
        spec(config::algorithm::token_bucket, {{1, 1e6, 3, 0}}),
        spec(config::algorithm::fixed_window, {{4, 60e6, 0, 0}}, true),
        spec(config::algorithm::token_bucket, {{2, 1e6, 2, 0}}, false, 2e6),
        spec(config::algorithm::fixed_window, {{7, 60e6, 0, 0}}),
    };
    std::mt19937 rng(7);
    int rejected = 0, split = 0;
    for (int round = 0; round < 200; ++round) {
        // A chain of 2..5 layers over distinct keys, split into parts at random.
        std::vector<layer_ref> chain;
        std::size_t n = 2 + rng() % 4;
        for (std::size_t l = 0; l < n; ++l)
            chain.push_back({"k" + std::to_string(l), &specs[rng() % specs.size()]});
        std::vector<int> part_of(n);
        int parts = 1 + static_cast<int>(rng() % n);
        for (auto& p : part_of)
            p = static_cast<int>(rng() % static_cast<unsigned>(parts));
        local_store whole;
        std::vector<local_store> stores(static_cast<std::size_t>(parts));
        double now = 1e12;
        for (int req = 0; req < 12; ++req, now += 150e3) {
            double cost = 1 + rng() % 2;
            auto expected = whole.decide(chain, now, cost);
            std::vector<std::vector<layer_ref>> part_refs(static_cast<std::size_t>(parts));
            std::vector<std::vector<int>> positions(static_cast<std::size_t>(parts));
            for (std::size_t l = 0; l < n; ++l) {
                part_refs[static_cast<std::size_t>(part_of[l])].push_back(chain[l]);
                positions[static_cast<std::size_t>(part_of[l])].push_back(static_cast<int>(l));
            }
            // Each part decides on its own store: until the first rejection every part
            // admitted every request, so each part's keys hold what the whole store's do.
            std::vector<part_decision> decided;
            for (int p = 0; p < parts; ++p) {
                auto& refs = part_refs[static_cast<std::size_t>(p)];
                if (refs.empty()) continue;
                decided.push_back({stores[static_cast<std::size_t>(p)].decide(refs, now, cost),
                                   &positions[static_cast<std::size_t>(p)]});
            }
            if (decided.size() > 1) ++split;
            auto got = combine_parts(decided);
            CAPTURE(round);
            CAPTURE(req);
            check_same(got, expected);
            // After a rejection the admitted parts consumed and the whole chain did not (a
            // refund's business, tested against Redis): the round ends.
            if (!expected.allowed) {
                ++rejected;
                break;
            }
        }
    }
    CHECK(rejected > 50);
    CHECK(split > 100);
}

TEST_CASE("leased layers decided by slot parts get the whole chain's decision and grants") {
    // SPEC §2 `sync` on a Cluster: a leased layer goes with its ask in the part of its slot;
    // the parts' lease records, merged by chain position, are the whole call's.
    std::vector<layer_spec> specs = {
        spec(config::algorithm::fixed_window, {{9, 60e6, 0, 0}}),
        spec(config::algorithm::token_bucket, {{1, 1e6, 6, 0}}),
        spec(config::algorithm::fixed_window, {{5, 60e6, 0, 0}}),
        spec(config::algorithm::token_bucket, {{2, 1e6, 4, 0}}),
    };
    std::mt19937 rng(11);
    int rejected = 0, split = 0, granted = 0;
    for (int round = 0; round < 200; ++round) {
        std::vector<layer_ref> chain;
        std::size_t n = 2 + rng() % 3;
        for (std::size_t l = 0; l < n; ++l)
            chain.push_back({"k" + std::to_string(l), &specs[rng() % specs.size()]});
        std::vector<int> part_of(n);
        int parts = 1 + static_cast<int>(rng() % n);
        for (auto& p : part_of)
            p = static_cast<int>(rng() % static_cast<unsigned>(parts));
        local_store whole;
        std::vector<local_store> stores(static_cast<std::size_t>(parts));
        double now = 1e12;
        for (int req = 0; req < 12; ++req, now += 150e3) {
            double cost = 1 + rng() % 2;
            // The first one or two layers leased: need 0..cost, want need..need+3.
            for (std::size_t l = 0; l < n; ++l) {
                chain[l].lease = {};
                if (l < 2 && rng() % 2) {
                    double need = static_cast<double>(rng() % 3);
                    chain[l].lease = {std::min(need, cost), std::min(need, cost) + rng() % 4};
                    if (chain[l].lease.want == 0) chain[l].lease = {};
                }
            }
            std::vector<lease_grant> expected_grants;
            auto expected = whole.decide(chain, now, cost, &expected_grants);
            std::vector<std::vector<layer_ref>> part_refs(static_cast<std::size_t>(parts));
            std::vector<std::vector<int>> positions(static_cast<std::size_t>(parts));
            for (std::size_t l = 0; l < n; ++l) {
                part_refs[static_cast<std::size_t>(part_of[l])].push_back(chain[l]);
                positions[static_cast<std::size_t>(part_of[l])].push_back(static_cast<int>(l));
            }
            std::vector<part_decision> decided;
            std::vector<placed_grant> placed;
            for (int p = 0; p < parts; ++p) {
                auto& refs = part_refs[static_cast<std::size_t>(p)];
                if (refs.empty()) continue;
                std::vector<lease_grant> g;
                decided.push_back({stores[static_cast<std::size_t>(p)].decide(refs, now, cost, &g),
                                   &positions[static_cast<std::size_t>(p)]});
                for (std::size_t l = 0, k = 0; l < refs.size(); ++l)
                    if (refs[l].lease.want > 0)
                        placed.push_back({positions[static_cast<std::size_t>(p)][l], g[k++]});
            }
            if (decided.size() > 1) ++split;
            auto got = combine_parts(decided);
            auto got_grants = combine_grants(placed);
            CAPTURE(round);
            CAPTURE(req);
            check_same(got, expected);
            REQUIRE(got_grants.size() == expected_grants.size());
            for (std::size_t k = 0; k < got_grants.size(); ++k) {
                CHECK(got_grants[k].granted == expected_grants[k].granted);
                CHECK(got_grants[k].remaining == expected_grants[k].remaining);
                CHECK(got_grants[k].reset_us == expected_grants[k].reset_us);
                CHECK(got_grants[k].rule == expected_grants[k].rule);
                if (got_grants[k].granted > 0) ++granted;
            }
            if (!expected.allowed) {
                ++rejected;
                break;
            }
        }
    }
    CHECK(rejected > 50);
    CHECK(split > 100);
    CHECK(granted > 100);
}

TEST_CASE("combine_grants: records of several parts come back in chain order") {
    auto got = combine_grants({{3, {4, 0, 0, 0}}, {0, {1, 0, 0, 0}}, {2, {3, 0, 0, 0}}});
    REQUIRE(got.size() == 3);
    CHECK(got[0].granted == 1);
    CHECK(got[1].granted == 3);
    CHECK(got[2].granted == 4);
}
