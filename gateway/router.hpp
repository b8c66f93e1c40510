// Route table (SPEC §3 "Route match"), sans-I/O: an exact `path` beats the longest
// `path_prefix`; `methods` and `host` narrow both. Built once per config.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace rategate::gateway {

class route_table {
  public:
    /// Keeps pointers into `cfg.routes`: `cfg` must outlive the table.
    explicit route_table(const config::config& cfg);

    /// The route for a request, or nullptr (404). `path` excludes the query string;
    /// `host` is the Host header as sent (a port and letter case are ignored).
    const config::route_config* match(std::string_view method, std::string_view path,
                                      std::string_view host) const;

  private:
    struct entry {
        const config::route_config* route;
        std::string key;  ///< exact path or prefix
    };
    std::vector<entry> exact_;     ///< config order
    std::vector<entry> prefixes_;  ///< longest first, then config order
};

/// Removes `prefix` from the front of the path part of `target` (query kept); an empty
/// result becomes "/". A target that does not start with `prefix` is returned unchanged.
std::string strip_path_prefix(std::string_view target, std::string_view prefix);

}  // namespace rategate::gateway
