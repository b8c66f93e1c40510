#include "gateway/http2/flood_guard.hpp"

namespace rategate::gateway::http2 {

flood_guard::flood_guard(std::uint32_t max_resets, std::uint32_t max_other)
    : max_{max_resets, max_other, max_other, max_other} {}

bool flood_guard::exceeded(kind k, clock::time_point now) {
    auto i = static_cast<std::size_t>(k);
    auto& w = windows_[i];
    if (w.count == 0 || now - w.start >= std::chrono::seconds(1)) {
        w.start = now;
        w.count = 0;
    }
    return ++w.count > max_[i];
}

}  // namespace rategate::gateway::http2
