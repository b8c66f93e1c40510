#include "limiters/local/local_backend.hpp"

namespace rategate::limiters {

chain_decision local_backend::decide_now(const std::vector<layer_ref>& refs, double cost,
                                         double now_us) {
    return store_.decide(refs, now_us, cost);
}

boost::asio::awaitable<backend::answer> local_backend::decide(const std::vector<layer_ref>& refs,
                                                              double cost, const clock& at,
                                                              bool want_state) {
    answer a;
    double now = at.now_us();
    a.decision = store_.decide(refs, now, cost);
    if (want_state && !a.decision.allowed && a.decision.decider >= 0) {
        const auto& key = refs[static_cast<std::size_t>(a.decision.decider)].key;
        if (auto st = store_.peek(key, now, &a.state.expiry_us)) {
            a.state.present = true;
            a.state.state = std::move(*st);
        }
    }
    co_return a;
}

}  // namespace rategate::limiters
