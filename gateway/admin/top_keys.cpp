#include "gateway/admin/top_keys.hpp"

#include <algorithm>

namespace rategate::gateway::admin {

void space_saving::add(std::string_view item, std::uint64_t n) {
    if (capacity_ == 0) return;
    if (auto it = index_.find(item); it != index_.end()) {
        items_[it->second].count += n;
        return;
    }
    if (items_.size() < capacity_) {
        items_.push_back({std::string(item), n, 0});
        index_.emplace(std::string(item), items_.size() - 1);
        return;
    }
    // Evict the smallest counter: the newcomer inherits its count as the error bound.
    auto smallest = std::min_element(
        items_.begin(), items_.end(),
        [](const heavy_hitter& a, const heavy_hitter& b) { return a.count < b.count; });
    auto pos = static_cast<std::size_t>(smallest - items_.begin());
    index_.erase(smallest->item);
    std::uint64_t inherited = smallest->count;
    *smallest = {std::string(item), inherited + n, inherited};
    index_.emplace(std::string(item), pos);
}

void space_saving::merge(const space_saving& other) {
    capacity_ = std::max(capacity_, other.capacity_);
    for (const auto& e : other.items_) {
        if (auto it = index_.find(std::string_view(e.item)); it != index_.end()) {
            items_[it->second].count += e.count;
            items_[it->second].error += e.error;
        } else {
            items_.push_back(e);
            index_.emplace(e.item, items_.size() - 1);
        }
    }
    if (items_.size() <= capacity_) return;
    auto sorted = top();
    sorted.resize(capacity_);
    clear();
    for (auto& e : sorted) {
        index_.emplace(e.item, items_.size());
        items_.push_back(std::move(e));
    }
}

std::vector<heavy_hitter> space_saving::top() const {
    auto out = items_;
    std::sort(out.begin(), out.end(), [](const heavy_hitter& a, const heavy_hitter& b) {
        return a.count != b.count ? a.count > b.count : a.item < b.item;
    });
    return out;
}

void space_saving::clear() {
    items_.clear();
    index_.clear();
}

windowed_top::windowed_top(std::size_t capacity, std::size_t slots)
    : slots_(std::max<std::size_t>(1, slots)), capacity_(capacity) {
    for (auto& s : slots_)
        s.sketch = space_saving(capacity);
}

void windowed_top::add(std::string_view item, std::int64_t now_ms, std::uint64_t n) {
    std::int64_t minute = now_ms / 60'000;
    auto& s = slots_[static_cast<std::size_t>(minute) % slots_.size()];
    if (s.minute != minute) {
        s.minute = minute;
        s.sketch.clear();
    }
    s.sketch.add(item, n);
}

space_saving windowed_top::snapshot(std::int64_t now_ms) const {
    std::int64_t minute = now_ms / 60'000;
    space_saving out(capacity_);
    for (const auto& s : slots_)
        if (s.minute >= 0 && s.minute > minute - static_cast<std::int64_t>(slots_.size()) &&
            s.minute <= minute)
            out.merge(s.sketch);
    return out;
}

}  // namespace rategate::gateway::admin
