// Route table (SPEC §3 "Route match"), sans-I/O: an exact `path` beats the longest
// `path_prefix`; `methods` and `host` narrow both; among equally specific matches a route with
// a `host` beats one without, then the first in the file. Built once per config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace rategate::gateway {

class route_table {
  public:
    /// Keeps pointers into `cfg.routes`: `cfg` must outlive the table.
    explicit route_table(const config::config& cfg);

    /// The route for a request, or nullptr (404). `path` is the normalised path without the
    /// query; `host` is the request's authority (`name[:port]`, letter case ignored; empty
    /// when the request has none). A Host without a port means `default_port` (80, or 443
    /// under TLS); a route whose `host` names a port matches only that port.
    const config::route_config* match(std::string_view method, std::string_view path,
                                      std::string_view host, std::uint16_t default_port = 80) const;

  private:
    struct entry {
        const config::route_config* route;
        std::string key;                    ///< exact path or prefix
        std::string host;                   ///< host name without port ("" = any host)
        std::optional<std::uint16_t> port;  ///< the port the route's host names
    };
    bool host_matches(const entry& e, std::string_view name, std::uint16_t port) const;
    std::vector<entry> exact_;     ///< hosted first, then config order
    std::vector<entry> prefixes_;  ///< longest first, hosted first, then config order
};

/// Splits an authority `name[:port]` ("[v6]:port" keeps its brackets) into name and port; a
/// missing or unparsable port is nullopt.
std::pair<std::string_view, std::optional<std::uint16_t>> split_host_port(std::string_view host);

/// Removes `prefix` from the front of the path part of `target` (query kept); an empty
/// result becomes "/". A target that does not start with `prefix` is returned unchanged.
std::string strip_path_prefix(std::string_view target, std::string_view prefix);

}  // namespace rategate::gateway
