// The limiters of a config compiled once into layer specs and per-route chains, and the
// computation of a request's layer keys from its identity (SPEC §2 scopes, key schema in
// keys.hpp). Shared read-only by every event loop; the per-request part is small.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "limiters/local/local_store.hpp"

namespace rategate::limiters {

/// One `header:NAME` scope's input: the field name as configured and the request's value of
/// its first field line (nullopt: the request has none).
struct header_value {
    std::string_view name;
    std::optional<std::string_view> value;
};

/// Who sent a request, as far as the scopes care: plain values, assembled once per request
/// before the keys are computed (gateway/limiting/identity.hpp; replay from its trace).
struct identity {
    std::optional<std::string_view> user;   ///< user id, if any
    std::string_view ip;                    ///< client IP (canonical text)
    std::span<const header_value> headers;  ///< the route's header scopes (policy::header_names)
    /// The value of header scope `name` (case-insensitive), nullopt when absent or not given.
    std::optional<std::string_view> header(std::string_view name) const;
};

class policy {
  public:
    /// One layer: its config and compiled spec.
    struct layer {
        const config::limiter_config* limiter;
        layer_spec spec;
        std::size_t index;    ///< position in the config's limiters (name order), for metrics
        std::string head;     ///< key_head(): the constant start of its scoped keys (prefix,
                              ///< escaped name, shape_tag); a global layer's key is global_key()
        double min_cost = 0;  ///< the least cost of a route that lists it (permits)
        double max_cost = 0;  ///< the largest cost of a route that lists it (permits)
    };

    /// `cfg` must outlive the policy.
    explicit policy(const config::config& cfg);

    /// The layers of route `route_index` (config order of routes), in chain order.
    const std::vector<const layer*>& chain(std::size_t route_index) const {
        return chains_.at(route_index);
    }
    /// The field names the `header:NAME` scopes of route `route_index` read, as configured,
    /// each once (the identity must carry their values).
    const std::vector<std::string_view>& header_names(std::size_t route_index) const {
        return header_names_.at(route_index);
    }
    /// Index of a route by name, or -1.
    int route_index(std::string_view name) const;

    /// The outcome of computing keys: the layers to decide (a layer whose key is missing with
    /// on_missing_key "skip" is left out), or the layer that denies the request outright.
    /// When `denied_by` or `invalid_by` is set, `refs` and `layers` are empty.
    struct request_keys {
        std::vector<layer_ref> refs;
        std::vector<const layer*> layers;   ///< parallel to refs
        const layer* denied_by = nullptr;   ///< on_missing_key "deny": 403
        const layer* invalid_by = nullptr;  ///< its identity is over max_identity_bytes: 400
    };
    /// The keys of route `route_index` for `who`, chain order, written over `out` (whose
    /// strings keep their capacity when it is used again). The first layer that denies the
    /// request (missing key with "deny", or a user id / header value longer than
    /// max_identity_bytes, SPEC §2) stops the computation.
    void keys_for(std::size_t route_index, const identity& who, request_keys& out) const;

    const std::string& key_prefix() const { return prefix_; }

  private:
    const config::config& cfg_;
    std::string prefix_;
    std::vector<layer> layers_;
    std::vector<std::vector<const layer*>> chains_;
    std::vector<std::vector<std::string_view>> header_names_;  ///< per route
    std::vector<std::string> route_parts_;                     ///< per route: "r=<escaped name>"
    std::vector<std::vector<std::string>> fixed_keys_;  ///< per route and chain position: the
                                                        ///< key of a global or route layer
};

/// The longest user id or `header:NAME` value that may become a key (SPEC §2), bytes.
inline constexpr std::size_t max_identity_bytes = 256;

/// The client address grouped for the ip scope. `ip` is canonical text (see
/// gateway::identity::canonical_ip; an IPv4-mapped IPv6 address is treated as its IPv4 address
/// all the same). IPv4 is masked to `ipv4_prefix` bits (0..32), IPv6 to `ipv6_prefix` bits
/// (0..128), and then printed as `address/prefix`, e.g. `198.51.100.0/24`, `2001:db8::/64`; at
/// the full length (32 / 128) and for text that is not an address, `ip` is returned unchanged.
std::string group_ip(std::string_view ip, int ipv4_prefix, int ipv6_prefix);

}  // namespace rategate::limiters
