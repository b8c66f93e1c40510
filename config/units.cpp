#include "config/units.hpp"

#include <charconv>
#include <cmath>
#include <limits>

namespace rategate::config {

namespace {

struct number_and_suffix {
    double value = 0;
    std::string_view suffix;
};

std::optional<number_and_suffix> split_number(std::string_view text, std::string& error) {
    std::size_t i = 0;
    while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.'))
        ++i;
    if (i == 0) {
        error = "expected a number followed by a unit, got \"" + std::string(text) + "\"";
        return std::nullopt;
    }
    double v = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, v);
    if (ec != std::errc{} || ptr != text.data() + i || !std::isfinite(v)) {
        error = "invalid number in \"" + std::string(text) + "\"";
        return std::nullopt;
    }
    return number_and_suffix{v, text.substr(i)};
}

}  // namespace

std::optional<std::chrono::microseconds> parse_duration(std::string_view text, std::string& error) {
    auto parts = split_number(text, error);
    if (!parts) return std::nullopt;
    double scale = 0;
    if (parts->suffix == "us")
        scale = 1;
    else if (parts->suffix == "ms")
        scale = 1e3;
    else if (parts->suffix == "s")
        scale = 1e6;
    else if (parts->suffix == "m")
        scale = 60e6;
    else if (parts->suffix == "h")
        scale = 3600e6;
    else {
        error = "unknown duration unit in \"" + std::string(text) + "\" (use us, ms, s, m or h)";
        return std::nullopt;
    }
    double us = parts->value * scale;
    if (us > 1e15) {
        error = "duration \"" + std::string(text) + "\" is too large";
        return std::nullopt;
    }
    double rounded = std::round(us);
    if (std::fabs(rounded - us) > 1e-6 * std::max(1.0, us)) {
        error = "duration \"" + std::string(text) + "\" is finer than 1us";
        return std::nullopt;
    }
    return std::chrono::microseconds(static_cast<std::int64_t>(rounded));
}

std::optional<std::uint64_t> parse_size(std::string_view text, std::string& error) {
    auto parts = split_number(text, error);
    if (!parts) return std::nullopt;
    double scale = 0;
    const auto& s = parts->suffix;
    if (s.empty() || s == "B")
        scale = 1;
    else if (s == "KB")
        scale = 1e3;
    else if (s == "MB")
        scale = 1e6;
    else if (s == "GB")
        scale = 1e9;
    else if (s == "KiB")
        scale = 1024.0;
    else if (s == "MiB")
        scale = 1024.0 * 1024;
    else if (s == "GiB")
        scale = 1024.0 * 1024 * 1024;
    else {
        error = "unknown size unit in \"" + std::string(text) +
                "\" (use B, KB, MB, GB, KiB, MiB or GiB)";
        return std::nullopt;
    }
    double bytes = parts->value * scale;
    if (bytes != std::floor(bytes) || bytes > 1e18) {
        error = "size \"" + std::string(text) + "\" is not a whole number of bytes";
        return std::nullopt;
    }
    return static_cast<std::uint64_t>(bytes);
}

std::string format_duration(std::chrono::microseconds d) {
    auto us = d.count();
    if (us == 0) return "0ms";
    if (us % 3'600'000'000 == 0) return std::to_string(us / 3'600'000'000) + "h";
    if (us % 60'000'000 == 0) return std::to_string(us / 60'000'000) + "m";
    if (us % 1'000'000 == 0) return std::to_string(us / 1'000'000) + "s";
    if (us % 1'000 == 0) return std::to_string(us / 1'000) + "ms";
    return std::to_string(us) + "us";
}

}  // namespace rategate::config
