#include "limiters/redis/redis_chain.hpp"

#include <algorithm>

#include "limiters/embedded_scripts.hpp"

namespace rategate::limiters {

std::string_view chain_script() {
    return embedded_script_source("chain.lua");
}

std::string cross_slot_chain_script() {
    return prefixed_script("lua/cluster/cross_slot.lua", chain_script());
}

redis::connection_settings connection_settings_of(const config::redis_config& r) {
    redis::connection_settings s;
    s.host = r.host;
    s.port = r.port;
    s.username = r.username;
    s.password = r.password;
    if (r.sentinel) {
        redis::sentinel_settings t;
        t.master = r.sentinel->master;
        for (const auto& n : r.sentinel->nodes)
            t.nodes.emplace_back(n.host, n.port);
        t.username = r.sentinel->username;
        t.password = r.sentinel->password;
        s.sentinel = std::move(t);
    }
    s.db = r.db;
    s.command_timeout = r.command_timeout;
    s.connect_timeout = std::max(std::chrono::milliseconds(200), r.command_timeout * 4);
    s.watchdog = std::max(std::chrono::milliseconds(500), r.command_timeout * 10);
    return s;
}

}  // namespace rategate::limiters
