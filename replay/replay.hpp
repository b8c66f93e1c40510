// `rategate replay` (SPEC §1): recorded traffic (JSON Lines) through the gateway's own limiting
// pipeline (gateway/limiting/pipeline.hpp: the same keys, over-limit cache, backends and
// outcome) on a virtual clock — the trace's t_ms — with the in-process twins or the Redis chain
// script. Replay and gateway agree by construction: there is no second decision flow here.
#pragma once

#include <iosfwd>
#include <string>

#include "config/config.hpp"

namespace rategate::replay {

/// Replays `trace_path` against `cfg` with `backend` ("local" or "redis"). Writes one JSON
/// decision per line and then `{"summary": {...}}` to `out`; errors (naming the trace line)
/// to `err`. Returns the process exit code (0, 1 for bad input, 2 for bad usage).
int run_replay(const config::config& cfg, const std::string& trace_path, const std::string& backend,
               std::ostream& out, std::ostream& err);

}  // namespace rategate::replay
