// The gateway's life as a process (SPEC §1 `rategate --config FILE`, §5 reload): load the
// config, start the event loops (server.hpp), then wait on the main thread for SIGHUP or a
// change of the file (polled every second) to reload — the new file is validated first, and an
// invalid one leaves the old config serving with every error logged — and for SIGINT/SIGTERM
// to drain and stop.
#pragma once

#include <string>

namespace rategate::gateway {

/// Runs the gateway on config `file` until SIGINT or SIGTERM; `log_level` overrides the
/// config's (empty: keep it). Returns the process exit code (0, or 1 when the config or the
/// listeners fail at start).
int serve(const std::string& file, const std::string& log_level);

}  // namespace rategate::gateway
