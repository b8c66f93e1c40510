// Parsing of the human-friendly units used in config files: durations and byte sizes.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rategate::config {

/// Parses a duration string: a non-negative decimal number followed by one of
/// `us`, `ms`, `s`, `m`, `h` (e.g. "250ms", "1.5s", "2m"). Returns µs, or nullopt
/// with `error` set when the text is not a duration.
std::optional<std::chrono::microseconds> parse_duration(std::string_view text, std::string& error);

/// Parses a size string: a non-negative integer optionally followed by `B`, `KB`,
/// `MB`, `GB` (powers of 1000) or `KiB`, `MiB`, `GiB` (powers of 1024). Returns bytes.
std::optional<std::uint64_t> parse_size(std::string_view text, std::string& error);

/// Formats µs the shortest exact way ("250ms", "2m", "1500us").
std::string format_duration(std::chrono::microseconds d);

}  // namespace rategate::config
