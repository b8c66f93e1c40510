#include "gateway/http/ratelimit_headers.hpp"

#include <cmath>
#include <optional>

#include "limiters/algorithms/table.hpp"

namespace rategate::gateway {

namespace http = boost::beast::http;

namespace {

std::string integer(double v) {
    return std::to_string(static_cast<long long>(std::max(0.0, v)));
}

// An sf-string: the name in quotes, with '"' and '\' escaped.
std::string sf_string(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out + '"';
}

}  // namespace

rate_headers describe_layer(const limiters::policy::layer& layer, int rule, double remaining,
                            double reset_us) {
    const auto& p = layer.spec.rules.at(static_cast<std::size_t>(rule));
    rate_headers h;
    h.name = layer.limiter->name;
    h.remaining = remaining;
    h.reset_s = std::ceil(reset_us / 1e6);
    // q and w as the algorithm's table row presents a rule (limiters/algorithms/table.hpp).
    const auto& row = limiters::algorithm_facts(layer.limiter->algo);
    h.quota = row.header_quota(p);
    h.window_s = row.header_window_s(p);
    return h;
}

std::optional<double> announced_remaining(std::string_view x_ratelimit_remaining,
                                          std::string_view ratelimit) {
    auto number = [](std::string_view v) -> std::optional<double> {
        if (v.empty()) return std::nullopt;
        try {
            return std::stod(std::string(v));
        } catch (...) {
            return std::nullopt;
        }
    };
    if (auto n = number(x_ratelimit_remaining)) return n;
    if (auto r = ratelimit.find(";r="); r != std::string_view::npos)
        return number(ratelimit.substr(r + 3));
    return std::nullopt;
}

rate_header_lines rate_header_fields(config::header_style style, const rate_headers& h) {
    rate_header_lines out;
    auto add = [&](std::string_view name, std::string value) {
        out.lines[out.count++] = {name, std::move(value)};
    };
    if (style == config::header_style::ietf || style == config::header_style::both) {
        auto w = h.window_s >= 1 ? integer(std::ceil(h.window_s)) : "1";
        add("RateLimit-Policy", sf_string(h.name) + ";q=" + integer(h.quota) + ";w=" + w);
        add("RateLimit",
            sf_string(h.name) + ";r=" + integer(h.remaining) + ";t=" + integer(h.reset_s));
    }
    if (style == config::header_style::legacy || style == config::header_style::both) {
        add("X-RateLimit-Limit", integer(h.quota));
        add("X-RateLimit-Remaining", integer(h.remaining));
        add("X-RateLimit-Reset", integer(h.reset_s));
    }
    return out;
}

void apply_rate_headers(http::fields& f, config::header_style style, const rate_headers& h,
                        bool keep_stricter_backend) {
    if (style == config::header_style::none) return;
    if (keep_stricter_backend) {
        auto value = [&f](std::string_view name) {
            auto it = f.find(name);
            return it == f.end() ? std::string_view() : std::string_view(it->value());
        };
        auto theirs = announced_remaining(value("X-RateLimit-Remaining"), value("RateLimit"));
        if (theirs && *theirs <= h.remaining) return;
    }
    for (const auto& [name, value] : rate_header_fields(style, h))
        f.set(name, value);
}

std::string retry_after_seconds(double retry_us) {
    return std::to_string(
        std::max<long long>(1, static_cast<long long>(std::ceil(retry_us / 1e6))));
}

}  // namespace rategate::gateway
