// Redis Sentinel replies, sans-I/O
// (https://redis.io/docs/latest/operate/oss_and_stack/management/sentinel/): the answer to SENTINEL
// get-master-addr-by-name and the +switch-master event of the Pub/Sub channel.
// limiters/redis/sentinel_watcher.cpp asks and subscribes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "limiters/redis/endpoint.hpp"
#include "limiters/redis/reply.hpp"

namespace rategate::limiters::redis {

/// True for a host a resolver could take: 1 to 255 bytes, none a space, a control character or
/// DEL, and not "?" (the unknown endpoint of Redis' replies). The one test of a host read from
/// a Sentinel or Cluster reply.
bool usable_host(std::string_view h);

/// The reply to `SENTINEL get-master-addr-by-name NAME`: a two-element array (host, port), or
/// nil when the sentinel does not know the master. nullopt for nil, an error or anything else.
std::optional<endpoint> parse_master_addr(const reply& r);

/// A message read while subscribed to `+switch-master`: the array
/// ("message", "+switch-master", "<name> <old-ip> <old-port> <new-ip> <new-port>").
/// Returns the new master's address when the message is that event for `master`.
std::optional<endpoint> parse_switch_master(const reply& r, std::string_view master);

}  // namespace rategate::limiters::redis
