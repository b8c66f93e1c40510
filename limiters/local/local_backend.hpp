// The in-process backend: chains decided in a local_store shared by every event loop, on the
// limiter clock the request path passes. Always ready; never fails.
#pragma once

#include "limiters/backend.hpp"

namespace rategate::limiters {

class local_backend final : public backend {
  public:
    /// `store` must outlive the backend.
    explicit local_backend(local_store& store) : store_(store) {}
    boost::asio::awaitable<answer> decide(const std::vector<layer_ref>& refs, double cost,
                                          const clock& at, bool want_state) override;
    bool ready() const override { return true; }
    /// The same decision at `now_us` (µs since the epoch), without a coroutine (the fallback
    /// path).
    chain_decision decide_now(const std::vector<layer_ref>& refs, double cost, double now_us);

  private:
    local_store& store_;
};

}  // namespace rategate::limiters
