#include "limiters/clock.hpp"

#include <chrono>

namespace rategate::limiters {

double wall_clock_us() {
    return static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

double wall_clock::now_us() const {
    return wall_clock_us();
}

double monotonic_clock::now_us() const {
    return static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace rategate::limiters
