// The keys limited most in the last minutes (SPEC §4 `GET /top`), sans-I/O: a Space-Saving
// heavy-hitters sketch per one-minute slot, per event loop; the admin thread merges snapshots.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rategate::gateway::admin {

/// One counted item: `count` over-estimates the true count by at most `error`.
struct heavy_hitter {
    std::string item;
    std::uint64_t count = 0;
    std::uint64_t error = 0;
};

/// Space-Saving (Metwally, Agrawal, El Abbadi, "Efficient Computation of Frequent and Top-k
/// Elements in Data Streams", ICDT 2005): at most `capacity` counters; an unseen item takes
/// over the smallest counter and inherits its count as its error. Any item whose true count
/// exceeds total/capacity is guaranteed to be held. add() of a held item allocates nothing.
class space_saving {
  public:
    explicit space_saving(std::size_t capacity = 64) : capacity_(capacity) {}
    void add(std::string_view item, std::uint64_t n = 1);
    /// Adds every counter of `other` (counts and errors summed), keeping the largest capacity.
    void merge(const space_saving& other);
    /// The held items, largest count first (ties by item).
    std::vector<heavy_hitter> top() const;
    void clear();
    std::size_t size() const { return items_.size(); }

  private:
    struct hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const {
            return std::hash<std::string_view>{}(s);
        }
    };
    std::size_t capacity_;
    std::vector<heavy_hitter> items_;
    std::unordered_map<std::string, std::size_t, hash, std::equal_to<>> index_;
};

/// Space-Saving over a sliding window of `slots` one-minute slots (the last 5 minutes by
/// default). Minutes are the caller's clock (`now_ms`, any monotonic or wall clock in ms).
class windowed_top {
  public:
    explicit windowed_top(std::size_t capacity = 64, std::size_t slots = 5);
    void add(std::string_view item, std::int64_t now_ms, std::uint64_t n = 1);
    /// The merged sketch of the slots within the window ending at `now_ms`.
    space_saving snapshot(std::int64_t now_ms) const;

  private:
    struct slot {
        std::int64_t minute = -1;
        space_saving sketch;
    };
    std::vector<slot> slots_;
    std::size_t capacity_;
};

}  // namespace rategate::gateway::admin
