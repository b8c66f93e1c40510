// Secret masking for GET /config (SPEC §4: "secrets masked wherever they stand, URLs included").
#pragma once

#include <nlohmann/json.hpp>

namespace rategate::config {

/// The text that stands for a masked secret.
inline constexpr const char* masked_secret = "****";

/// A copy of a config document with every secret replaced by "****": the value of any key that
/// names a secret (`password`, `secret`, `token`, `credential`; not `*_env`, which names an
/// environment variable), at any depth, and the password of any URL string with userinfo
/// (`redis://:pw@host`, `redis://user:pw@host`), whatever its percent-encoding.
nlohmann::json mask_secrets(const nlohmann::json& doc);

}  // namespace rategate::config
