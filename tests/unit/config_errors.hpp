// Test helper: a config text's rendered errors.
#pragma once

#include <string>

#include "config/config.hpp"

namespace rategate::config::testing {

/// Parses `text` as the file "f.json" and returns its rendered error lines ("" when valid).
inline std::string errors_of(const std::string& text) {
    try {
        parse_config(text, "f.json");
        return "";
    } catch (const config_errors& e) {
        return e.what();
    }
}

}  // namespace rategate::config::testing
