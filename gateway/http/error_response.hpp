// The JSON error responses of SPEC §3: `{"error": "...", "message": "..."}`.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <string_view>

namespace rategate::gateway {

/// A complete error response: status, JSON body `{"error": code, "message": message}`,
/// Content-Type, Content-Length and Connection (keep-alive or close) set.
boost::beast::http::response<boost::beast::http::string_body> make_error_response(
    unsigned status, std::string_view code, std::string_view message, bool keep_alive,
    unsigned version = 11);

/// The rate-limited response of SPEC §3: `status` (the route's on_limit), JSON body
/// `{"error": "rate_limited", "message", "limiter", "retry_after_ms"}` and Retry-After.
boost::beast::http::response<boost::beast::http::string_body> make_limited_response(
    unsigned status, std::string_view message, std::string_view limiter, double retry_after_us,
    bool keep_alive, unsigned version = 11);

/// For a response to HEAD: drops the body but keeps its Content-Length (RFC 9110 §9.3.2), so the
/// next response on a keep-alive connection stays framed.
void omit_body(boost::beast::http::response<boost::beast::http::string_body>& res);

}  // namespace rategate::gateway
