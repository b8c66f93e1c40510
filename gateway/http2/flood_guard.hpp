// The counters behind HTTP/2's abuse limits (SPEC §3 "HTTP/2"), sans-I/O and clocked by the
// caller: client resets (rapid reset, CVE-2023-44487), SETTINGS, PING and empty
// DATA/HEADERS/CONTINUATION frames (CVE-2019-9512/9518), each counted per one-second window.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace rategate::gateway::http2 {

class flood_guard {
  public:
    using clock = std::chrono::steady_clock;
    enum class kind : std::uint8_t { reset, settings, ping, empty_frame };

    /// `max_resets`: client RST_STREAMs allowed per second (http2.max_resets_per_second);
    /// the other kinds allow `max_other` per second (SPEC: 100).
    explicit flood_guard(std::uint32_t max_resets, std::uint32_t max_other = 100);

    /// Counts one frame of kind `k` received at `now`. True when it goes past its kind's
    /// limit within the current one-second window: the connection must end with GOAWAY
    /// ENHANCE_YOUR_CALM. A window starts at the first frame after the previous one ended.
    bool exceeded(kind k, clock::time_point now);

  private:
    struct window {
        clock::time_point start{};
        std::uint32_t count = 0;
    };
    std::array<std::uint32_t, 4> max_;
    std::array<window, 4> windows_{};
};

}  // namespace rategate::gateway::http2
