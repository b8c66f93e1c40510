// The limiters of a config compiled once into layer specs and per-route chains, and the
// computation of a request's layer keys from its identity (SPEC §2 scopes, key schema in
// keys.hpp). Shared read-only by every event loop; the per-request part is small.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "limiters/local_store.hpp"

namespace rategate::limiters {

/// Who sent a request, as far as the scopes care.
struct identity {
    std::optional<std::string_view> user;                                     ///< user id, if any
    std::string_view ip;                                                      ///< client IP (text)
    std::function<std::optional<std::string_view>(std::string_view)> header;  ///< header lookup
};

class policy {
  public:
    /// One layer: its config and compiled spec.
    struct layer {
        const config::limiter_config* limiter;
        layer_spec spec;
        std::size_t index;  ///< position in the config's limiters (name order), for metrics
    };

    /// `cfg` must outlive the policy.
    explicit policy(const config::config& cfg);

    /// The layers of route `route_index` (config order of routes), in chain order.
    const std::vector<const layer*>& chain(std::size_t route_index) const {
        return chains_.at(route_index);
    }
    /// Index of a route by name, or -1.
    int route_index(std::string_view name) const;

    /// The outcome of computing keys: the layers to decide (a layer whose key is missing with
    /// on_missing_key "skip" is left out), or the layer that denies the request outright.
    struct request_keys {
        std::vector<layer_ref> refs;
        std::vector<const layer*> layers;  ///< parallel to refs
        const layer* denied_by = nullptr;  ///< on_missing_key "deny"
    };
    void keys_for(std::size_t route_index, const identity& who, request_keys& out) const;

    const std::string& key_prefix() const { return prefix_; }

  private:
    const config::config& cfg_;
    std::string prefix_;
    std::vector<layer> layers_;
    std::vector<std::vector<const layer*>> chains_;
};

/// The client address grouped for the ip scope: IPv6 masked to `ipv6_prefix` bits (IPv4 and
/// unparseable text unchanged).
std::string group_ip(std::string_view ip, int ipv6_prefix);

}  // namespace rategate::limiters
