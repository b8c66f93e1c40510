// The chain script's decoded decisions held to the chain they answer (limiters/redis/
// chain_codec.hpp fits_chain): the gateway indexes its chain with a reply's positions and rule
// indices, so a reply outside it must fail the call rather than index past the chain.
#include <doctest/doctest.h>

#include "limiters/redis/chain_codec.hpp"

using namespace rategate::limiters;

TEST_CASE("a decoded decision fits the chain it answers or the call fails") {
    layer_spec one_rule, two_rules;
    one_rule.rules.resize(1);
    two_rules.rules.resize(2);
    // A three-layer chain: one rule, two rules (leased), one rule.
    std::vector<layer_ref> chain{
        {"k0", &one_rule, {}}, {"k1", &two_rules, {1, 5}}, {"k2", &one_rule, {}}};
    const std::vector<lease_grant> one_grant{{5, 10, 1000, 1}};
    struct row {
        const char* what;
        chain_decision d;
        std::vector<lease_grant> grants;
        bool fits;
    };
    auto admitted = [](int header, int rule) {
        chain_decision d;
        d.header_layer = header;
        d.rule = rule;
        return d;
    };
    auto refused = [](int decider, int rule) {
        chain_decision d;
        d.allowed = false;
        d.decider = decider;
        d.header_layer = decider;
        d.rule = rule;
        return d;
    };
    chain_decision shadowed = admitted(0, 0);
    shadowed.shadow_mask = 0b100;
    chain_decision shadow_outside = admitted(0, 0);
    shadow_outside.shadow_mask = 0b1000;
    const row rows[] = {
        {"admitted, header layer 2", admitted(2, 0), one_grant, true},
        {"admitted, no header layer (all leased)", admitted(-1, 0), one_grant, true},
        {"refused by layer 1, its second rule", refused(1, 1), one_grant, true},
        {"a shadow layer inside the chain", shadowed, one_grant, true},
        {"refused with no deciding layer", refused(-1, 0), one_grant, false},
        {"deciding layer past the chain", refused(3, 0), one_grant, false},
        {"header layer past the chain", admitted(3, 0), one_grant, false},
        {"a rule the header layer does not have", admitted(0, 1), one_grant, false},
        {"a negative rule", admitted(2, -1), one_grant, false},
        {"a shadow bit past the chain", shadow_outside, one_grant, false},
        {"no lease record for the leased layer", admitted(2, 0), {}, false},
        {"a lease record too many", admitted(2, 0), {{5, 10, 1000, 1}, {5, 10, 1000, 0}}, false},
        {"a lease record's rule past its layer's", admitted(2, 0), {{5, 10, 1000, 2}}, false},
    };
    for (const auto& r : rows) {
        CAPTURE(r.what);
        CHECK(fits_chain(r.d, chain, r.grants) == r.fits);
    }
    // A whole call: request 0 the chain above, request 1 the same chain refused by layer 9.
    std::vector<chain_decision> decisions{admitted(2, 0), refused(9, 0)};
    std::vector<std::size_t> leased{1, 1};
    std::vector<lease_grant> grants{{5, 10, 1000, 1}, {5, 10, 1000, 1}};
    auto refs_of = [&](std::size_t) -> const std::vector<layer_ref>& { return chain; };
    CHECK_FALSE(fits_batch(decisions, refs_of, leased, grants));
    decisions[1] = refused(0, 0);
    CHECK(fits_batch(decisions, refs_of, leased, grants));
    grants.pop_back();  // request 1's record missing
    CHECK_FALSE(fits_batch(decisions, refs_of, leased, grants));
}
