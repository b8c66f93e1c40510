// What only OpenSSL and libjwt can tell about a configuration, before any event loop uses it:
// the listener's certificate pair loads, every upstream's TLS settings (CA file) load, the JWT
// keys parse. `rategate check`, startup and every reload run it, so a file that passes the
// config loader but names an unusable resource never reaches a loop.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"

namespace rategate::gateway {

/// Builds, and drops, each resource `cfg` names; one line per unusable one, "PATH: what went
/// wrong" with PATH its config path (`tls.key`, `upstreams.NAME.tls.ca`, `identity.user.jwt`).
/// With `listener_tls` false the listener's pair is not tried (a reload keeps the previous
/// pair when the new one fails, SPEC §3).
std::vector<std::string> check_resources(const config::config& cfg, bool listener_tls = true);

}  // namespace rategate::gateway
