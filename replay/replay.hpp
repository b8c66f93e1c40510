// `rategate replay` (SPEC §1): recorded traffic (JSON Lines) through each route's limiter chain
// on a virtual clock — the trace's t_ms — with the in-process twins or the Redis chain script.
#pragma once

#include <iosfwd>
#include <string>

#include "config/config.hpp"

namespace rategate::gateway {

/// Replays `trace_path` against `cfg` with `backend` ("local" or "redis"). Writes one JSON
/// decision per line and then `{"summary": {...}}` to `out`; errors (naming the trace line)
/// to `err`. Returns the process exit code (0, 1 for bad input, 2 for bad usage).
int replay(const config::config& cfg, const std::string& trace_path, const std::string& backend,
           std::ostream& out, std::ostream& err);

}  // namespace rategate::gateway
