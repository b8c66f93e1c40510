// The rate-limit response headers of SPEC §3, sans-I/O: RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11, Structured-Field lists) and X-RateLimit-*.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

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

/// One rate-limit response field: RateLimit-Policy and RateLimit (ietf), X-RateLimit-Limit,
/// -Remaining and -Reset (legacy).
enum class rate_field { policy, ratelimit, limit, remaining, reset };

/// The fields of `style`, in the order they are written (none for header_style::none).
std::span<const rate_field> rate_fields(config::header_style style);

/// The field's name as written.
std::string_view rate_field_name(rate_field f);

/// Appends the value of field `f` for `h` onto `out`, formatted in place (no temporaries):
/// `"name";q=Q;w=W`, `"name";r=R;t=T` (sf-string name, integers), or a bare integer.
void append_rate_value(std::string& out, rate_field f, const rate_headers& h);

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
