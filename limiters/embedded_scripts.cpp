#include "limiters/embedded_scripts.hpp"

#include <stdexcept>
#include <string>

namespace rategate::limiters {

std::string_view embedded_script_source(std::string_view path) {
    for (const auto& s : embedded_scripts())
        if (s.path == path) return s.source;
    throw std::out_of_range("no embedded script " + std::string(path));
}

std::string prefixed_script(std::string_view prefix_path, std::string_view body) {
    std::string out(embedded_script_source(prefix_path));
    if (out.empty() || out.back() != '\n') out += '\n';
    out += body;
    return out;
}

}  // namespace rategate::limiters
