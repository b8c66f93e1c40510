#include "gateway/http/error_response.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

namespace rategate::gateway {

namespace http = boost::beast::http;

http::response<http::string_body> make_error_response(unsigned status, std::string_view code,
                                                      std::string_view message, bool keep_alive,
                                                      unsigned version) {
    http::response<http::string_body> res{static_cast<http::status>(status), version};
    res.set(http::field::server, "rategate");
    res.set(http::field::content_type, "application/json");
    nlohmann::json body = {{"error", code}, {"message", message}};
    // Replace invalid UTF-8 (e.g. echoed paths) rather than throwing.
    res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    res.keep_alive(keep_alive);
    res.prepare_payload();
    return res;
}

http::response<http::string_body> make_limited_response(unsigned status, std::string_view message,
                                                        std::string_view limiter,
                                                        double retry_after_us, bool keep_alive,
                                                        unsigned version) {
    auto res = make_error_response(status, "rate_limited", message, keep_alive, version);
    auto retry_ms = static_cast<long long>(std::ceil(retry_after_us / 1000.0));
    nlohmann::json body = {{"error", "rate_limited"},
                           {"message", message},
                           {"limiter", limiter},
                           {"retry_after_ms", retry_ms}};
    res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    res.set(http::field::retry_after,
            std::to_string(
                std::max<long long>(1, static_cast<long long>(std::ceil(retry_after_us / 1e6)))));
    res.prepare_payload();
    return res;
}

void omit_body(http::response<http::string_body>& res) {
    res.body().clear();
}

}  // namespace rategate::gateway
