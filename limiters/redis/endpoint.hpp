// The address of one Redis server (a master, a replica, a sentinel, a cluster node), as the
// config, Sentinel and Cluster replies name it.
#pragma once

#include <cstdint>
#include <string>

namespace rategate::limiters::redis {

/// host:port of a Redis server. The host is a name or an address, unresolved.
struct endpoint {
    std::string host;
    std::uint16_t port = 0;
    bool operator==(const endpoint&) const = default;
};

}  // namespace rategate::limiters::redis
