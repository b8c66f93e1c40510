#include "limiters/redis/cluster_slots.hpp"

#include "limiters/redis/sentinel.hpp"

#include <array>
#include <charconv>
#include <map>
#include <utility>

namespace rategate::limiters::redis {

namespace {

// CRC16/XMODEM, one table lookup per byte (cluster spec, Appendix A).
constexpr std::array<std::uint16_t, 256> crc16_table() {
    std::array<std::uint16_t, 256> t{};
    for (unsigned i = 0; i < 256; ++i) {
        auto c = static_cast<std::uint16_t>(i << 8);
        for (int bit = 0; bit < 8; ++bit)
            c = static_cast<std::uint16_t>((c & 0x8000) ? (c << 1) ^ 0x1021 : c << 1);
        t[i] = c;
    }
    return t;
}
constexpr auto crc16_lookup = crc16_table();

constexpr std::uint16_t crc16(std::string_view s) {
    std::uint16_t crc = 0;
    for (char ch : s) {
        auto byte = static_cast<unsigned char>(ch);
        crc = static_cast<std::uint16_t>((crc << 8) ^ crc16_lookup[((crc >> 8) ^ byte) & 0xff]);
    }
    return crc;
}
static_assert(crc16("123456789") == 0x31C3, "the cluster spec's check value");

bool is_string(const reply& r) {
    return r.type == reply::kind::string;
}
bool is_int(const reply& r) {
    return r.type == reply::kind::integer;
}
bool is_array(const reply& r) {
    return r.type == reply::kind::array;
}

bool valid_port(std::int64_t p) {
    return p > 0 && p <= 65535;
}
bool valid_slot(std::int64_t s) {
    return s >= 0 && s < slot_count;
}

// Where a node's reply says it is. `known` is false for "?" (CLUSTER SLOTS page: an unknown
// node, not the one asked).
struct located {
    bool known = true;
    endpoint addr;
};

// host: the endpoint as the reply gives it (nullptr for nil). nullopt when malformed.
std::optional<located> locate(const std::string* host, std::int64_t port, const endpoint& asked) {
    if (!valid_port(port)) return std::nullopt;
    located out;
    out.addr.port = static_cast<std::uint16_t>(port);
    if (host == nullptr || host->empty()) {
        out.addr.host = asked.host;  // nil or "": the host we asked, with this port
    } else if (*host == "?") {
        out.known = false;
        out.addr.host.clear();
        return out;
    } else {
        out.addr.host = *host;
    }
    if (!usable_host(out.addr.host)) return std::nullopt;
    return out;
}

}  // namespace

// Assembles a slot_map: each slot assigned once, each master listed once.
class slot_map_builder {
  public:
    /// Gives [start, end] to `master` (nullptr: a master we cannot reach). False when the
    /// range is out of bounds, reversed, or meets a slot already given.
    bool assign(std::int64_t start, std::int64_t end, const cluster_node* master) {
        if (!valid_slot(start) || !valid_slot(end) || start > end) return false;
        std::uint16_t index = slot_map::none_;
        if (master) index = index_of(*master);
        for (auto s = static_cast<std::size_t>(start); s <= static_cast<std::size_t>(end); ++s) {
            if (seen_[s]) return false;
            seen_[s] = true;
            map_.owner_[s] = index;
        }
        return true;
    }
    slot_map take() { return std::move(map_); }

  private:
    std::uint16_t index_of(const cluster_node& n) {
        // Each master added gets a slot no other has, or the parse fails: at most 16384 + 1
        // masters, so an index never reaches none_.
        auto [it, added] = index_.try_emplace({n.addr.host, n.addr.port},
                                              static_cast<std::uint16_t>(map_.masters_.size()));
        if (added) map_.masters_.push_back(n);
        return it->second;
    }

    slot_map map_;
    std::vector<bool> seen_ = std::vector<bool>(slot_count, false);
    std::map<std::pair<std::string, std::uint16_t>, std::uint16_t> index_;  // address → master
};

std::uint16_t key_slot(std::string_view key) {
    auto open = key.find('{');
    if (open != std::string_view::npos) {
        auto close = key.find('}', open + 1);
        if (close != std::string_view::npos && close != open + 1)
            key = key.substr(open + 1, close - open - 1);
    }
    return static_cast<std::uint16_t>(crc16(key) & (slot_count - 1));
}

std::optional<std::size_t> slot_map::owner(std::uint16_t slot) const {
    if (slot >= slot_count || owner_[slot] == none_) return std::nullopt;
    return owner_[slot];
}

bool slot_map::complete() const {
    for (auto o : owner_)
        if (o == none_) return false;
    return true;
}

namespace {

// One node of a CLUSTER SLOTS entry: [endpoint, port, id?, ...].
struct slots_node {
    located where;
    std::string id;
};

std::optional<slots_node> parse_slots_node(const reply& n, const endpoint& asked) {
    if (!is_array(n) || n.elements.size() < 2) return std::nullopt;
    const auto& host = n.elements[0];
    const auto& port = n.elements[1];
    if (!(is_string(host) || host.type == reply::kind::nil) || !is_int(port)) return std::nullopt;
    auto where = locate(is_string(host) ? &host.str : nullptr, port.integer, asked);
    if (!where) return std::nullopt;
    slots_node out{*where, {}};
    if (n.elements.size() > 2) {
        if (!is_string(n.elements[2])) return std::nullopt;
        out.id = n.elements[2].str;
    }
    return out;
}

// A CLUSTER SHARDS node: the fields we use, as the flat key/value array gives them.
struct shards_node {
    const reply* id = nullptr;
    const reply* port = nullptr;
    const reply* ip = nullptr;
    const reply* endpoint = nullptr;
    const reply* role = nullptr;
    const reply* health = nullptr;
};

std::optional<shards_node> parse_shards_node(const reply& n) {
    if (!is_array(n) || n.elements.size() % 2 != 0) return std::nullopt;
    shards_node out;
    for (std::size_t i = 0; i < n.elements.size(); i += 2) {
        const auto& key = n.elements[i];
        const auto& value = n.elements[i + 1];
        if (!is_string(key)) return std::nullopt;
        const std::string& k = key.str;
        const reply** field = nullptr;
        bool integer = false;
        if (k == "id") {
            field = &out.id;
        } else if (k == "port") {
            field = &out.port;
            integer = true;
        } else if (k == "ip") {
            field = &out.ip;
        } else if (k == "endpoint") {
            field = &out.endpoint;
        } else if (k == "role") {
            field = &out.role;
        } else if (k == "health") {
            field = &out.health;
        } else if (k == "tls-port") {
            if (!is_int(value) || !valid_port(value.integer)) return std::nullopt;
            continue;
        } else if (k == "hostname") {
            if (!is_string(value)) return std::nullopt;
            continue;
        } else if (k == "replication-offset") {
            if (!is_int(value)) return std::nullopt;
            continue;
        } else {
            continue;  // a field of a later Redis
        }
        if (*field != nullptr) return std::nullopt;  // a field twice
        // The endpoint is nil with cluster-preferred-endpoint-type unknown-endpoint.
        bool nil_ok = field == &out.endpoint && value.type == reply::kind::nil;
        if (!nil_ok && (integer ? !is_int(value) : !is_string(value))) return std::nullopt;
        if (integer && !valid_port(value.integer)) return std::nullopt;
        *field = &value;
    }
    return out;
}

// Redis 7.0 says "fail", the command page "failed".
bool failing(const shards_node& n) {
    return n.health != nullptr && (n.health->str == "fail" || n.health->str == "failed");
}

}  // namespace

std::optional<slot_map> parse_cluster_slots(const reply& r, const endpoint& asked) {
    if (!is_array(r)) return std::nullopt;
    slot_map_builder b;
    for (const auto& range : r.elements) {
        if (!is_array(range) || range.elements.size() < 3) return std::nullopt;
        const auto& start = range.elements[0];
        const auto& end = range.elements[1];
        if (!is_int(start) || !is_int(end)) return std::nullopt;
        auto master = parse_slots_node(range.elements[2], asked);
        if (!master) return std::nullopt;
        for (std::size_t i = 3; i < range.elements.size(); ++i)
            if (!parse_slots_node(range.elements[i], asked)) return std::nullopt;
        cluster_node node{master->where.addr, master->id};
        if (!b.assign(start.integer, end.integer, master->where.known ? &node : nullptr))
            return std::nullopt;
    }
    return b.take();
}

std::optional<slot_map> parse_cluster_shards(const reply& r, const endpoint& asked) {
    if (!is_array(r)) return std::nullopt;
    slot_map_builder b;
    for (const auto& shard : r.elements) {
        if (!is_array(shard) || shard.elements.size() % 2 != 0) return std::nullopt;
        const reply* slots = nullptr;
        const reply* nodes = nullptr;
        for (std::size_t i = 0; i < shard.elements.size(); i += 2) {
            const auto& key = shard.elements[i];
            if (!is_string(key)) return std::nullopt;
            const reply** field = key.str == "slots"   ? &slots
                                  : key.str == "nodes" ? &nodes
                                                       : nullptr;
            if (field == nullptr) continue;
            if (*field != nullptr || !is_array(shard.elements[i + 1])) return std::nullopt;
            *field = &shard.elements[i + 1];
        }
        if (slots == nullptr || nodes == nullptr || slots->elements.size() % 2 != 0)
            return std::nullopt;
        for (const auto& s : slots->elements)
            if (!is_int(s)) return std::nullopt;

        // The master: the one node whose role is "master"; when a failed master is still listed
        // beside its promoted replica (Redis 7.2 keeps both in the shard), the one not failing.
        std::vector<shards_node> masters;
        for (const auto& n : nodes->elements) {
            auto node = parse_shards_node(n);
            if (!node) return std::nullopt;
            if (node->role != nullptr && node->role->str == "master") masters.push_back(*node);
        }
        if (slots->elements.empty()) continue;  // serves nothing (e.g. a master failed over)
        if (masters.size() > 1) std::erase_if(masters, failing);
        if (masters.size() != 1) return std::nullopt;
        const auto& m = masters.front();
        if (m.port == nullptr) return std::nullopt;  // TLS-only: no port we can use
        const reply* host = m.endpoint != nullptr ? m.endpoint : m.ip;
        if (host == nullptr) return std::nullopt;
        auto where = locate(is_string(*host) ? &host->str : nullptr, m.port->integer, asked);
        if (!where) return std::nullopt;
        cluster_node node{where->addr, m.id != nullptr ? m.id->str : std::string()};
        for (std::size_t i = 0; i < slots->elements.size(); i += 2)
            if (!b.assign(slots->elements[i].integer, slots->elements[i + 1].integer,
                          where->known ? &node : nullptr))
                return std::nullopt;
    }
    return b.take();
}

std::optional<redirect> parse_redirect(const reply& r, const endpoint& asked) {
    if (r.type != reply::kind::error) return std::nullopt;
    std::string_view s(r.str);
    redirect out;
    if (s.starts_with("MOVED ")) {
        out.k = redirect::moved;
        s.remove_prefix(6);
    } else if (s.starts_with("ASK ")) {
        out.k = redirect::ask;
        s.remove_prefix(4);
    } else {
        return std::nullopt;
    }
    auto space = s.find(' ');
    if (space == std::string_view::npos) return std::nullopt;
    auto slot_text = s.substr(0, space);
    auto address = s.substr(space + 1);
    unsigned slot = 0;
    auto [slot_end, slot_ec] =
        std::from_chars(slot_text.data(), slot_text.data() + slot_text.size(), slot);
    if (slot_ec != std::errc() || slot_end != slot_text.data() + slot_text.size() ||
        slot >= slot_count)
        return std::nullopt;
    out.slot = static_cast<std::uint16_t>(slot);
    // The port follows the last ':'; an IPv6 host keeps its own colons.
    auto colon = address.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    auto port_text = address.substr(colon + 1);
    unsigned port = 0;
    auto [port_end, port_ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (port_ec != std::errc() || port_end != port_text.data() + port_text.size() ||
        !valid_port(port))
        return std::nullopt;
    std::string host(address.substr(0, colon));
    auto where = locate(&host, port, asked);
    if (!where || !where->known) return std::nullopt;
    out.to = where->addr;
    return out;
}

bool is_tryagain(const reply& r) {
    return r.error_code() == "TRYAGAIN";
}

bool is_clusterdown(const reply& r) {
    return r.error_code() == "CLUSTERDOWN";
}

}  // namespace rategate::limiters::redis
