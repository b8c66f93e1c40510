// The Lua scripts under limiters/, embedded at build time (limiters/embed_lua.cmake).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rategate::limiters {

struct embedded_script {
    std::string_view path;    ///< relative to limiters/, e.g. "lua/50_token_bucket.lua"
    std::string_view source;  ///< the file's text
};

/// Every .lua file under limiters/, sorted by path.
const std::vector<embedded_script>& embedded_scripts();

/// The source of `path` (relative to limiters/); throws std::out_of_range when absent.
std::string_view embedded_script_source(std::string_view path);

/// The source of `prefix_path` (ending in a newline), then `body`: a script variant such as
/// the cross-slot scripts of limiters/lua/cluster/, whose first line must be the shebang.
std::string prefixed_script(std::string_view prefix_path, std::string_view body);

}  // namespace rategate::limiters
