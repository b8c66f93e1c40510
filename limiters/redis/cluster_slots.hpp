// Redis Cluster, sans-I/O: the hash slot of a key, the slot map read from CLUSTER SLOTS or
// CLUSTER SHARDS, and the MOVED / ASK / TRYAGAIN / CLUSTERDOWN replies. Nothing here opens a
// socket; the cluster connection (to come) asks and follows.
// Source: the Redis Cluster specification,
// https://redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec/ ("Key distribution
// model", "Hash tags", "Redirection and resharding", Appendix A "CRC16 reference implementation"),
// and the CLUSTER SLOTS / CLUSTER SHARDS command pages of redis.io.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "limiters/redis/endpoint.hpp"
#include "limiters/redis/reply.hpp"

namespace rategate::limiters::redis {

/// Number of hash slots of a Redis Cluster; slots are 0 .. slot_count - 1.
inline constexpr std::uint16_t slot_count = 16384;

/// The hash slot of `key` (0..16383): CRC16 (XMODEM: polynomial 0x1021, initial value 0, no
/// reflection, no final xor; "123456789" → 0x31C3) of the key, modulo 16384. When the key has
/// a hash tag — a '{', then a '}' after it with at least one byte between them — only the bytes
/// between the first '{' and the first '}' after it are hashed; `{}` (nothing between) means
/// the whole key is hashed (cluster spec, "Hash tags"). Our layer keys are
/// `<prefix>{<limiter~shape|parts>}` (limiters/keys.hpp), so a layer's slot ignores the prefix.
std::uint16_t key_slot(std::string_view key);

/// A master as the slot map knows it: where to connect, and its node id (40 hex characters
/// from Redis; empty when the reply did not carry one, as CLUSTER SLOTS before Redis 4).
struct cluster_node {
    endpoint addr;
    std::string id;
    bool operator==(const cluster_node&) const = default;
};

/// Which master serves each of the 16384 slots. Holds only masters that serve at least one
/// slot, each once (CLUSTER SLOTS repeats a master for each of its ranges), in the order the
/// reply first names them.
class slot_map {
  public:
    /// The masters; owner() returns indexes into this vector.
    const std::vector<cluster_node>& masters() const { return masters_; }
    /// The index in masters() of the master serving `slot`; nullopt when no reachable master
    /// serves it (unassigned, or its master's endpoint is "?") or `slot` >= 16384.
    std::optional<std::size_t> owner(std::uint16_t slot) const;
    /// True when every slot 0..16383 has an owner.
    bool complete() const;

  private:
    friend class slot_map_builder;
    static constexpr std::uint16_t none_ = 0xffff;  // more than the 16384 masters there can be
    std::vector<cluster_node> masters_;
    std::vector<std::uint16_t> owner_ = std::vector<std::uint16_t>(slot_count, none_);
};

/// The reply to CLUSTER SLOTS: an array of [start, end, master, replica...] where start and
/// end are integers (an inclusive range within 0..16383, start <= end) and each node is an
/// array [endpoint, port, id?, metadata?...] (endpoint a bulk string or nil, port an integer
/// 1..65535; further elements are ignored, as the command page asks of clients).
///
/// `asked` is the server the command was sent to. The endpoint rules are the CLUSTER SLOTS
/// page's: nil or "" means "the host you asked, with this port" (nodes behind a load balancer,
/// or a node that does not know its own IP yet); "?" means an unknown node (hostname
/// announcement misconfigured) — not the asked one — so that master's slots get no owner and
/// the map is not complete().
///
/// nullopt for an error reply and for anything malformed: a wrong type or arity, a slot out of
/// range, start > end, a slot listed twice, a port out of range, a host that cannot be one
/// (control characters or spaces, over 255 bytes). Replicas are checked, not kept.
std::optional<slot_map> parse_cluster_slots(const reply& r, const endpoint& asked);

/// The reply to CLUSTER SHARDS (Redis 7.0+), in RESP2: an array of shards, each a flat
/// key/value array with "slots" (a flat array of inclusive [start, end] integer pairs) and
/// "nodes" (an array of flat key/value arrays: "id", "port", "tls-port", "ip", "endpoint",
/// "hostname", "role", "replication-offset", "health"; keys we do not know are skipped). A
/// shard's master is its node whose "role" is "master"; it must have a "port" (a TLS-only
/// node has only "tls-port", which this client cannot use) and an "endpoint" (or, absent that,
/// an "ip"), read with the same ""/"?" rules and `asked` as parse_cluster_slots. A shard with
/// no slots is skipped, whatever its nodes; one with slots needs exactly one master.
/// nullopt for an error reply and anything malformed, as parse_cluster_slots.
std::optional<slot_map> parse_cluster_shards(const reply& r, const endpoint& asked);

/// A redirection (cluster spec, "Redirection and resharding"): MOVED when the slot has a new
/// owner (update the map, retry there), ASK when only this one command must go to the node
/// importing the slot (send ASKING then the command, once; the map is unchanged).
struct redirect {
    enum kind { moved, ask };
    kind k = moved;
    std::uint16_t slot = 0;
    endpoint to;
    bool operator==(const redirect&) const = default;
};

/// Parses the error replies `MOVED <slot> <host>:<port>` and `ASK <slot> <host>:<port>`. The
/// port follows the last ':' (an IPv6 host comes without brackets: `MOVED 1 ::1:6381`); an
/// empty host (`MOVED 1 :6381`, a node that does not know its own address) means the host of
/// `asked`, the server that replied. nullopt for any other reply, a slot outside 0..16383, a
/// port outside 1..65535, a host "?" (unknown endpoint) or one that cannot be a host.
std::optional<redirect> parse_redirect(const reply& r, const endpoint& asked);

/// `-TRYAGAIN ...`: a multi-key command during resharding whose keys are split between the
/// nodes for now; retry after a short wait (cluster spec, "Multi-keys operations").
bool is_tryagain(const reply& r);

/// `-CLUSTERDOWN ...`: the cluster cannot serve this slot (it is unassigned, or the cluster
/// state is fail); the call fails and the map is re-read.
bool is_clusterdown(const reply& r);

}  // namespace rategate::limiters::redis
