#include "gateway/http/ratelimit_headers.hpp"

#include <charconv>
#include <cmath>
#include <optional>

#include "limiters/algorithms/table.hpp"

namespace rategate::gateway {

namespace http = boost::beast::http;

namespace {

// A non-negative integer (negatives as 0, fractions cut), written in place.
void append_integer(std::string& out, double v) {
    char digits[24];
    auto [end, ec] =
        std::to_chars(digits, digits + sizeof digits, static_cast<long long>(std::max(0.0, v)));
    out.append(digits, end);
}

// An sf-string: the name in quotes, with '"' and '\' escaped.
void append_sf_string(std::string& out, std::string_view s) {
    out += '"';
    // Runs without a character to escape go in one append (a name rarely has any).
    std::size_t run = 0;
    for (std::size_t i = 0; i < s.size(); ++i)
        if (s[i] == '"' || s[i] == '\\') {
            out.append(s.substr(run, i - run));
            out += '\\';
            run = i;  // the escaped character starts the next run
        }
    out.append(s.substr(run));
    out += '"';
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

std::span<const rate_field> rate_fields(config::header_style style) {
    static constexpr rate_field all[] = {rate_field::policy, rate_field::ratelimit,
                                         rate_field::limit, rate_field::remaining,
                                         rate_field::reset};
    std::span<const rate_field> fields(all);
    switch (style) {
        case config::header_style::ietf:
            return fields.first(2);
        case config::header_style::legacy:
            return fields.subspan(2);
        case config::header_style::both:
            return fields;
        case config::header_style::none:
            break;
    }
    return {};
}

std::string_view rate_field_name(rate_field f) {
    switch (f) {
        case rate_field::policy:
            return "RateLimit-Policy";
        case rate_field::ratelimit:
            return "RateLimit";
        case rate_field::limit:
            return "X-RateLimit-Limit";
        case rate_field::remaining:
            return "X-RateLimit-Remaining";
        case rate_field::reset:
            break;
    }
    return "X-RateLimit-Reset";
}

void append_rate_value(std::string& out, rate_field f, const rate_headers& h) {
    switch (f) {
        case rate_field::policy:
            append_sf_string(out, h.name);
            out += ";q=";
            append_integer(out, h.quota);
            out += ";w=";
            append_integer(out, h.window_s >= 1 ? std::ceil(h.window_s) : 1);
            return;
        case rate_field::ratelimit:
            append_sf_string(out, h.name);
            out += ";r=";
            append_integer(out, h.remaining);
            out += ";t=";
            append_integer(out, h.reset_s);
            return;
        case rate_field::limit:
            return append_integer(out, h.quota);
        case rate_field::remaining:
            return append_integer(out, h.remaining);
        case rate_field::reset:
            return append_integer(out, h.reset_s);
    }
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
    std::string value;
    for (auto field : rate_fields(style)) {
        value.clear();
        append_rate_value(value, field, h);
        f.set(rate_field_name(field), value);
    }
}

std::string retry_after_seconds(double retry_us) {
    return std::to_string(
        std::max<long long>(1, static_cast<long long>(std::ceil(retry_us / 1e6))));
}

}  // namespace rategate::gateway
