#include "gateway/http/grpc_timeout.hpp"

#include <cstdint>

namespace rategate::gateway::grpc {

std::optional<std::chrono::microseconds> parse_timeout(std::string_view value) {
    if (value.size() < 2 || value.size() > 9) return std::nullopt;
    std::int64_t n = 0;
    for (char c : value.substr(0, value.size() - 1)) {
        if (c < '0' || c > '9') return std::nullopt;
        n = n * 10 + (c - '0');
    }
    switch (value.back()) {
        case 'H':
            return std::chrono::microseconds(n * 3'600'000'000LL);
        case 'M':
            return std::chrono::microseconds(n * 60'000'000LL);
        case 'S':
            return std::chrono::microseconds(n * 1'000'000LL);
        case 'm':
            return std::chrono::microseconds(n * 1'000LL);
        case 'u':
            return std::chrono::microseconds(n);
        case 'n':
            return std::chrono::microseconds((n + 999) / 1000);
        default:
            return std::nullopt;
    }
}

std::string format_timeout(std::chrono::microseconds left) {
    auto us = left.count();
    if (us <= 0) return "0n";
    constexpr std::int64_t max_digits = 99'999'999;
    // Finest unit first; a coarser one rounds down, never promising time that is not left.
    if (us <= max_digits) return std::to_string(us) + "u";
    if (us / 1'000 <= max_digits) return std::to_string(us / 1'000) + "m";
    if (us / 1'000'000 <= max_digits) return std::to_string(us / 1'000'000) + "S";
    if (us / 60'000'000 <= max_digits) return std::to_string(us / 60'000'000) + "M";
    return std::to_string(std::min<std::int64_t>(us / 3'600'000'000LL, max_digits)) + "H";
}

}  // namespace rategate::gateway::grpc
