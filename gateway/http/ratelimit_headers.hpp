// The rate-limit response headers of SPEC §3, sans-I/O: RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11, Structured-Field lists) and X-RateLimit-*.
#pragma once

#include <array>
#include <boost/beast/http/fields.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "config/config.hpp"
#include "limiters/policy.hpp"

namespace rategate::gateway {

/// What the headers say about the most restrictive layer.
struct rate_headers {
    std::string name;      ///< the limiter's name (the policy name)
    double quota = 0;      ///< q: permits per window
    double window_s = 1;   ///< w: window, seconds
    double remaining = 0;  ///< r
    double reset_s = 0;    ///< t: seconds until the quota is fully available again (rounded up)
};

/// Quota and window of rule `rule` of a layer, as the headers present them.
rate_headers describe_layer(const limiters::policy::layer& layer, int rule, double remaining,
                            double reset_us);

/// The header lines of `style` for `h`, in order: RateLimit-Policy and RateLimit (ietf),
/// X-RateLimit-Limit, -Remaining and -Reset (legacy); none for header_style::none.
struct rate_header_lines {
    std::array<std::pair<std::string_view, std::string>, 5> lines;
    std::size_t count = 0;
    auto begin() const { return lines.begin(); }
    auto end() const { return lines.begin() + static_cast<std::ptrdiff_t>(count); }
};
rate_header_lines rate_header_fields(config::header_style style, const rate_headers& h);

/// The remaining permits a backend announced itself: its X-RateLimit-Remaining value, else
/// the `r=` of its RateLimit value (empty views: the field is absent); nothing when neither
/// reads as a number.
std::optional<double> announced_remaining(std::string_view x_ratelimit_remaining,
                                          std::string_view ratelimit);

/// Sets the headers of `style` on `f`. With `keep_stricter_backend`, headers a backend already
/// set are kept when they show fewer remaining permits (never loosened); otherwise ours win.
void apply_rate_headers(boost::beast::http::fields& f, config::header_style style,
                        const rate_headers& h, bool keep_stricter_backend);

/// Retry-After for a limited request: whole seconds, rounded up, at least 1.
std::string retry_after_seconds(double retry_us);

}  // namespace rategate::gateway
