// libFuzzer harness for the chain script's reply as the gateway decodes it
// (limiters/redis/chain_codec.cpp): whatever a server sends as the bulk string, decode_batch
// either refuses it or gives one decision and one state per record, reading no byte twice and
// none outside the reply; a state it reports is one the C++ twin can evaluate.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "limiters/algorithms/algorithms.hpp"
#include "limiters/redis/chain_codec.hpp"

using namespace rategate::limiters;

namespace {
void require(bool ok) {
    if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    redis::reply r;
    r.type = redis::reply::kind::string;
    r.str.assign(reinterpret_cast<const char*>(data), size);
    std::vector<chain_decision> decisions;
    std::vector<decided_state> states;
    double now = 0;
    bool ok = decode_batch(r, decisions, &states, &now);
    if (!ok) return 0;
    require(decisions.size() == states.size());
    // Records are at least 11 doubles each: the decoder cannot have invented any.
    require(decisions.size() * 11 * sizeof(double) <= size);
    std::size_t state_doubles = 0;
    for (const auto& s : states) {
        if (!s.present) continue;
        state_doubles += 2 + s.state.values.size() + 2 * s.state.log.size();
        // Evaluating a reported state never crashes, whatever its numbers.
        layer_spec spec;
        spec.algo = s.state.log.empty() ? rategate::config::algorithm::token_bucket
                                        : rategate::config::algorithm::sliding_window_log;
        spec.rules.push_back({1, 1e6, 1, 0});
        layer_state next;
        double ttl = 0;
        (void)evaluate(spec, s.state, now, 1, next, ttl);
    }
    require((decisions.size() * 11 + state_doubles) * sizeof(double) == size);
    return 0;
}
