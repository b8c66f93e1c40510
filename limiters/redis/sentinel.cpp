#include "limiters/redis/sentinel.hpp"

#include <charconv>
#include <sstream>
#include <vector>

namespace rategate::limiters::redis {

namespace {
std::optional<std::uint16_t> port_of(std::string_view s) {
    unsigned v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v == 0 || v > 65535) return std::nullopt;
    return static_cast<std::uint16_t>(v);
}

}  // namespace

bool usable_host(std::string_view h) {
    if (h.empty() || h.size() > 255 || h == "?") return false;
    for (char c : h)
        if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return false;
    return true;
}

std::optional<endpoint> parse_master_addr(const reply& r) {
    if (r.type != reply::kind::array || r.elements.size() != 2) return std::nullopt;
    const auto& h = r.elements[0];
    const auto& p = r.elements[1];
    if (h.type != reply::kind::string || p.type != reply::kind::string || !usable_host(h.str))
        return std::nullopt;
    auto port = port_of(p.str);
    if (!port) return std::nullopt;
    return endpoint{h.str, *port};
}

std::optional<endpoint> parse_switch_master(const reply& r, std::string_view master) {
    if (r.type != reply::kind::array || r.elements.size() != 3) return std::nullopt;
    if (r.elements[0].str != "message" || r.elements[1].str != "+switch-master")
        return std::nullopt;
    std::istringstream in(r.elements[2].str);
    std::vector<std::string> words;
    for (std::string w; in >> w;)
        words.push_back(w);
    if (words.size() != 5 || words[0] != master || !usable_host(words[3])) return std::nullopt;
    auto port = port_of(words[4]);
    if (!port) return std::nullopt;
    return endpoint{words[3], *port};
}

}  // namespace rategate::limiters::redis
