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

// The remaining count a backend already announced, if any.
std::optional<double> backend_remaining(const http::fields& f) {
    if (auto it = f.find("X-RateLimit-Remaining"); it != f.end()) {
        try {
            return std::stod(std::string(it->value()));
        } catch (...) {
        }
    }
    if (auto it = f.find("RateLimit"); it != f.end()) {
        std::string v(it->value());
        auto r = v.find(";r=");
        if (r != std::string::npos) {
            try {
                return std::stod(v.substr(r + 3));
            } catch (...) {
            }
        }
    }
    return std::nullopt;
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

void apply_rate_headers(http::fields& f, config::header_style style, const rate_headers& h,
                        bool keep_stricter_backend) {
    if (style == config::header_style::none) return;
    if (keep_stricter_backend) {
        if (auto theirs = backend_remaining(f); theirs && *theirs <= h.remaining) return;
    }
    auto w = h.window_s >= 1 ? integer(std::ceil(h.window_s)) : "1";
    if (style == config::header_style::ietf || style == config::header_style::both) {
        f.set("RateLimit-Policy", sf_string(h.name) + ";q=" + integer(h.quota) + ";w=" + w);
        f.set("RateLimit",
              sf_string(h.name) + ";r=" + integer(h.remaining) + ";t=" + integer(h.reset_s));
    }
    if (style == config::header_style::legacy || style == config::header_style::both) {
        f.set("X-RateLimit-Limit", integer(h.quota));
        f.set("X-RateLimit-Remaining", integer(h.remaining));
        f.set("X-RateLimit-Reset", integer(h.reset_s));
    }
}

std::string retry_after_seconds(double retry_us) {
    return std::to_string(
        std::max<long long>(1, static_cast<long long>(std::ceil(retry_us / 1e6))));
}

}  // namespace rategate::gateway
