// Group commit, as both Redis backends batch their calls (redis_backend.cpp per connection,
// cluster_backend.cpp per master): at most one call in flight per lane; what arrives meanwhile
// waits for its reply and goes in the next call, up to max_batch items. A busy event loop thus
// sends fewer, larger calls (Redis time per decision falls with the batch size) at the cost of
// at most one round trip of waiting. Sans-I/O: the caller sends what take() gives and says
// done() when the call ended.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

namespace rategate::limiters::redis {

template <class Item>
class group_commit {
  public:
    /// Up to `lanes` calls in flight at once (one per connection or master), each with at most
    /// `max_batch` items.
    explicit group_commit(std::size_t max_batch, std::size_t lanes = 1)
        : max_batch_(max_batch), lanes_(lanes) {}

    /// Queues an item for a later call.
    void push(Item item) { waiting_.push_back(std::move(item)); }

    /// The next call's items, oldest first (at most max_batch), counted in flight until done();
    /// empty when nothing waits or every lane has a call in flight.
    std::vector<Item> take() {
        if (waiting_.empty() || in_flight_ >= lanes_) return {};
        auto n = static_cast<std::ptrdiff_t>(std::min(max_batch_, waiting_.size()));
        std::vector<Item> call(std::make_move_iterator(waiting_.begin()),
                               std::make_move_iterator(waiting_.begin() + n));
        waiting_.erase(waiting_.begin(), waiting_.begin() + n);
        ++in_flight_;
        return call;
    }

    /// A call from take() ended (answered or failed): its lane takes the next one.
    void done() {
        if (in_flight_ > 0) --in_flight_;
    }

    /// Every waiting item, taken out (to be routed again); calls in flight stay counted.
    std::vector<Item> take_all() { return std::exchange(waiting_, {}); }

    bool empty() const { return waiting_.empty(); }
    std::size_t waiting() const { return waiting_.size(); }
    std::size_t in_flight() const { return in_flight_; }

  private:
    std::vector<Item> waiting_;
    std::size_t max_batch_;
    std::size_t lanes_;
    std::size_t in_flight_ = 0;
};

}  // namespace rategate::limiters::redis
